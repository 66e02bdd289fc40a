"""Lesson 01, gradient descent and its variants."""
