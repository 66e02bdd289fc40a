"""Lesson 02, parallel machines and programming models: threads, shared memory, speed-up."""
