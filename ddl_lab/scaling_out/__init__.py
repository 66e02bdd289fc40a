"""Lesson 11: scaling out for real — DDP against lesson 05's synchronous SGD, torchrun on two
(virtual) hosts, elastic restarts from a checkpoint, federated averaging, when it pays."""
