"""Lesson 07, the parameter server: shards, Downpour, Sandblaster L-BFGS."""
