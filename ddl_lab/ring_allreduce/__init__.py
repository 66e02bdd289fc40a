"""Lesson 06, ring allreduce: hand-written collectives and the shared-memory allreduce."""
