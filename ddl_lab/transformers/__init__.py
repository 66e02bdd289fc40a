"""Lesson 12, transformers: a small GPT across ranks (memory, tensor, sequence, context)."""
