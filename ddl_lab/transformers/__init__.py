"""Lesson 12, transformers: a tiny GPT across ranks — tensor, vocabulary and sequence
parallelism (``tensor``, ``vocab``, ``sequence``) and context parallelism by ring attention."""
