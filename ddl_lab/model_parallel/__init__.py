"""Lesson 09, model parallelism: layers split over processes, pipelines (GPipe, 1F1B,
interleaved 1F1B) and their bubble, tensor parallelism (the memory each scheme saves: lesson 10),
DistBelief's diminishing returns, and hybrid data + model parallelism."""
