"""Lesson 05, synchronous data parallelism."""
