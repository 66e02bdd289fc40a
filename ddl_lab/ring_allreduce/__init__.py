"""Lesson 06, ring allreduce: hand-written collectives and the shared-memory allreduce."""
from . import algorithms  # noqa: F401  (registers §7's allreduces in engine.ALGORITHMS)
