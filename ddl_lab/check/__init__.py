"""Graded checks, one function per task: ``check.rank(my_rank)`` prints a pass line or raises
``CheckFailed`` saying what is wrong. Each lesson's checks live in ``check/<slug>.py``, are
declared with ``@task`` (``_core.TASKS``, the one registry) and are listed here, lesson by
lesson (``tests/tools/test_tasks.py``)."""
from ._core import CheckFailed
from .welcome import rank, offsets, darts_per_rank, pi_plan
from .gradient_descent import (batch_gradient, minibatch_sgd_epoch, adagrad_step,
                               learning_rate, best_step, sgd_plan, adamw_step)
from .parallel_models import threaded_sum, next_chunk, amdahl_bound, dynamic_chunk
from .hogwild import hogwild_update, hogwild_worker, expected_overlap, hogwild_plan
from .message_passing import (gather, scatter, parallel_gradient, pagerank_compute,
                              tree_gather, tree_gather_time, chain_bcast, pipeline_chunks)
from .data_parallel import sync_sgd_step, local_sgd, straggler_time, sync_plan, noise_scale
from .ring_allreduce import (ring_cost, ring_allreduce, tree_ring_crossover, bucket_bytes,
                             halving_doubling, allreduce_choice)
from .parameter_server import (ssp_gate, staleness_lr, restore_shard, worst_staleness,
                               downpour_plan)
from .compression import (strom_threshold, error_feedback_onebit, qsgd_rounding,
                          index_coding, strom_bytes, strom_plan, gossip_step)
from .model_parallel import stage_step, one_f_one_b, row_parallel, bytes_per_rank, pipeline_plan
from .memory import zero2_step, zero_bytes, memory_plan
from .scaling_out import fedavg, resume, rendezvous_env, best_workers, fedavg_plan
from .transformers import parallel_plan, ring_attention, transformer_bytes, vocab_cross_entropy
from .performance import overlap_from_trace, model_flops, compute_bound_batch
from .experts import ep_layer, mesh_bytes, choose_layout
from .capstone import budget_bytes, capstone, capstone_gpt

__all__ = [
    "CheckFailed",
    "rank", "offsets", "darts_per_rank", "pi_plan",
    "batch_gradient", "minibatch_sgd_epoch", "adagrad_step", "learning_rate", "best_step",
    "sgd_plan", "adamw_step",
    "threaded_sum", "next_chunk", "amdahl_bound", "dynamic_chunk",
    "hogwild_update", "hogwild_worker", "expected_overlap", "hogwild_plan",
    "gather", "scatter", "parallel_gradient", "pagerank_compute", "tree_gather",
    "tree_gather_time", "chain_bcast", "pipeline_chunks",
    "sync_sgd_step", "local_sgd", "straggler_time", "sync_plan", "noise_scale",
    "ring_cost", "ring_allreduce", "tree_ring_crossover", "bucket_bytes", "halving_doubling",
    "allreduce_choice",
    "ssp_gate", "staleness_lr", "restore_shard", "worst_staleness", "downpour_plan",
    "strom_threshold", "error_feedback_onebit", "qsgd_rounding", "index_coding", "strom_bytes",
    "strom_plan", "gossip_step",
    "stage_step", "one_f_one_b", "row_parallel", "bytes_per_rank", "pipeline_plan",
    "zero2_step", "zero_bytes", "memory_plan",
    "fedavg", "resume", "rendezvous_env", "best_workers", "fedavg_plan",
    "ring_attention", "vocab_cross_entropy", "transformer_bytes", "parallel_plan",
    "overlap_from_trace", "model_flops", "compute_bound_batch",
    "ep_layer", "mesh_bytes", "choose_layout",
    "budget_bytes", "capstone", "capstone_gpt",
]
