"""Lesson 14, experts: a mixture-of-experts layer in the GPT, and expert parallelism."""
