"""Lesson 04, message-passing workers: the communicator, parallel GD, MapReduce, Pregel."""
