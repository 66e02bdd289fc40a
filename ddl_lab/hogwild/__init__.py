"""Lesson 03, Hogwild!: lock-free SGD on shared memory."""
