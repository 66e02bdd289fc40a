"""Lesson 10, training memory: what a model costs per rank (parameters, gradients, optimizer
state, activations) measured from the tensors, mixed precision, activation recomputation,
and ZeRO-1/2/3 by hand on real workers beside FSDP2 and ``ZeroRedundancyOptimizer``."""
