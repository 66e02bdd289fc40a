"""Lesson 08, compressing the updates: compressors and training with them on the wire."""
