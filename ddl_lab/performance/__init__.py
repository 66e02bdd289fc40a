"""Lesson 13 (performance): where the time goes — this machine's roofline (``roofline``), the
model FLOPs of a step and its MFU (``flops``), real profiler traces of every rank merged into
one and read (``traces``), and the per-rank batch at which data parallelism stops being
communication-bound (``crossover``); pictures in ``plots``."""
