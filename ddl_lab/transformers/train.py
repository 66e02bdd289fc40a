"""Training the small GPT on the standard library's own source (lesson 12, transformers).

``train(cfg, tc)`` runs on one process, or on every rank of a cluster
(``cluster.run(train, cfg, tc)``): data parallel, each of n ranks takes its b/n rows of the
same global batch, and one ``all_reduce`` per step sums the flattened gradients (and the
loss, riding in the same buffer) before every rank takes the same AdamW step — so n ranks
compute what one process computes with the global batch, up to the order of the sums.
The validation loss is measured on fixed windows of the held-out tail of the corpus, beside
the unigram model's cross-entropy (``text.unigram_loss``): the bar a model that has learnt
nothing about context cannot pass.

``MODEL`` and ``TRAIN`` are the sizes chosen to pass that bar clearly in under a minute on
one CPU process (one torch thread): hidden 64, 4 heads, 2 layers, sequences of 64 characters
(110 400 parameters), 800 AdamW steps of 32 sequences (2 048 characters), peak rate 6e-3.
Measured (torch 2.x, a shared 2-core machine at load 4.5): 21 s of steps, 77 000 characters
per second; validation loss 2.37 after 100 steps, 2.02 after 300, 1.65 after 800, against the
unigram model's 3.05 nats per character. On 2 ranks the curve is the same to the 3rd decimal
(1.655 at 800 steps; the per-step losses differ by < 7e-4 after 800 Adam steps, by < 1e-5
after 4); samples are Python-shaped ("return func = _moncodine(other_difnates.").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.ml.gpt import GPT, GPTConfig, lm_loss, sample
from ddl_lab.ml.text import VOCAB, corpus, batches, decode, encode, unigram_loss
from ddl_lab.runtime import device

__all__ = ["TrainConfig", "TrainRun", "MODEL", "TRAIN", "lr_at", "train",
           "evaluate", "model_of", "sample_text"]


@dataclass(frozen=True)
class TrainConfig:
    """The run: steps, global batch (sequences, split evenly over the ranks), AdamW's peak
    learning rate with linear warm-up and cosine decay to ``min_lr`` × peak, gradient clipping,
    how often and on how many validation windows the model is measured, and the seed (of the
    weights and of the batches)."""

    steps: int = 800
    batch: int = 32
    lr: float = 6e-3
    warmup: int = 30
    min_lr: float = 0.1
    clip: float = 1.0
    eval_every: int = 100
    eval_windows: int = 64
    seed: int = 0


MODEL = GPTConfig(vocab=VOCAB, seq=64, hidden=64, heads=4, layers=2)
TRAIN = TrainConfig()


@dataclass
class TrainRun:
    """What one rank saw: the global training loss per step, (step, validation loss) pairs,
    the unigram model's validation cross-entropy, the seconds spent in training steps, the
    global tokens per second, and the final weights (rank 0 only)."""

    world_size: int
    losses: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    unigram: float = math.nan
    seconds: float = 0.0
    tokens_per_s: float = 0.0
    state: dict[str, torch.Tensor] | None = None

    @property
    def val_loss(self) -> float:
        """The last validation loss measured."""
        return self.evals[-1][1] if self.evals else math.nan


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up over ``tc.warmup`` steps, then cosine decay to ``tc.min_lr`` × peak."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    done = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (tc.min_lr + (1 - tc.min_lr) * 0.5 * (1 + math.cos(math.pi * done)))


def _world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


@torch.no_grad()
def evaluate(model: GPT, windows: int = 64) -> float:
    """Mean cross-entropy (nats/character) on ``windows`` fixed validation windows of the
    model's sequence length, the windows shared among the ranks (one all_reduce)."""
    rank, world = _world()
    x, y = corpus().windows(windows, model.cfg.seq)
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    mine = slice(rank, windows, world)
    logits = model(x[mine].to(dev))
    total = torch.stack([torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), y[mine].reshape(-1).to(dev),
        reduction="sum"), torch.tensor(float(y[mine].numel()), device=dev)])
    if world > 1:
        dist.all_reduce(total)
    model.train(was)
    return float(total[0] / total[1])


def _sync(params: list[nn.Parameter], loss: torch.Tensor, world: int) -> float:
    """Average the gradients (and the loss) over the ranks in one all_reduce; the loss."""
    flat = torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1)])
    if world > 1:
        dist.all_reduce(flat)
        flat /= world
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    return float(flat[-1])


def train(cfg: GPTConfig = MODEL, tc: TrainConfig = TRAIN) -> TrainRun:
    """Train ``GPT(cfg, tc.seed)`` for ``tc.steps`` AdamW steps on the corpus; on every rank
    of a process group, data parallel over the global batch ``tc.batch``."""
    rank, world = _world()
    if tc.batch % world:
        raise ValueError(f"global batch {tc.batch} does not split evenly over {world} ranks")
    local, dev = tc.batch // world, device()
    model = GPT(cfg, tc.seed).to(dev)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=tc.lr, betas=(0.9, 0.99), weight_decay=0.0)
    run = TrainRun(world, unigram=unigram_loss())
    data = batches(tc.seed, tc.batch, cfg.seq)
    for step in range(tc.steps):
        x, y = (t[rank * local:(rank + 1) * local].to(dev) for t in next(data))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = lm_loss(model(x), y)
        loss.backward()
        run.losses.append(_sync(params, loss, world))
        nn.utils.clip_grad_norm_(params, tc.clip)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc)
        opt.step()
        run.seconds += time.perf_counter() - t0
        if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
            run.evals.append((step + 1, evaluate(model, tc.eval_windows)))
    run.tokens_per_s = tc.steps * tc.batch * cfg.seq / max(run.seconds, 1e-9)
    if rank == 0:
        run.state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return run


def model_of(run: TrainRun, cfg: GPTConfig = MODEL) -> GPT:
    """The trained model, rebuilt from rank 0's weights."""
    if run.state is None:
        raise ValueError("this TrainRun holds no weights (only rank 0's does)")
    model = GPT(cfg)
    model.load_state_dict(run.state)
    return model


def sample_text(model: GPT, prompt: str, n: int = 200, seed: int = 0,
                temperature: float = 0.8) -> str:
    """``prompt`` and ``n`` characters the model writes after it."""
    return decode(sample(model, encode(prompt), n, seed, temperature))
