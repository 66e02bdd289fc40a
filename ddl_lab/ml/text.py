"""A character-level corpus read at run time from this machine (lesson 12, transformers).

The text is the source of 22 modules of the Python standard library of the interpreter that
runs it (``sysconfig.get_paths()["stdlib"]``, a fixed list, in order: about 450 KB on 3.11):
nothing is downloaded and nothing is copied into the course. Why this text: every learner has
it, it is real language with long-range structure (indentation, matching brackets, names
defined and used again) that only attention reaches, and a small model learns it visibly in a
minute. Missing modules are skipped, so the corpus is the same on one machine every run.

The vocabulary is fixed: newline and printable ASCII (96 symbols), every other character one
unknown id (``UNK``): 97 ids. The first 90 % of the characters train, the last 10 % validate.
``batches`` draws (inputs, next-character targets) windows from a seed.
"""
from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import torch

__all__ = ["MODULES", "CHARS", "UNK", "VOCAB", "encode", "decode", "Corpus", "corpus",
           "batches", "unigram_loss"]

MODULES = ("abc", "bisect", "calendar", "codecs", "colorsys", "contextlib", "copy", "csv",
           "dataclasses", "fractions", "functools", "heapq", "keyword", "operator", "queue",
           "random", "shlex", "statistics", "string", "textwrap", "types", "weakref")
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))
UNK = len(CHARS)
VOCAB = UNK + 1
_IDS = {c: i for i, c in enumerate(CHARS)}


def encode(text: str) -> torch.Tensor:
    """Character ids (int64), ``UNK`` for a character outside the vocabulary."""
    return torch.tensor([_IDS.get(c, UNK) for c in text], dtype=torch.long)


def decode(ids: torch.Tensor) -> str:
    """The text of ``ids``; ``UNK`` reads as '�'."""
    return "".join(CHARS[i] if i < UNK else "\ufffd" for i in ids.reshape(-1).tolist())


@dataclass(frozen=True)
class Corpus:
    """The encoded text split in two: ``train`` and ``val`` (1-D int64), and the files read."""

    train: torch.Tensor
    val: torch.Tensor
    files: tuple[str, ...]

    def split(self, name: str) -> torch.Tensor:
        if name not in ("train", "val"):
            raise ValueError(f"split is 'train' or 'val', got {name!r}")
        return self.train if name == "train" else self.val

    def windows(self, b: int, s: int, split: str = "val") -> tuple[torch.Tensor, torch.Tensor]:
        """``b`` windows of ``s`` characters spread evenly over a split (the same every call):
        inputs and targets, each (b, s) — the fixed set a validation loss is measured on."""
        data = self.split(split)
        starts = torch.linspace(0, len(data) - s - 1, b).long()
        return _gather(data, starts, s)


def _gather(data: torch.Tensor, starts: torch.Tensor, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = starts[:, None] + torch.arange(s + 1)
    window = data[rows]
    return window[:, :-1], window[:, 1:]


@lru_cache(maxsize=1)
def corpus() -> Corpus:
    """Read the corpus from this interpreter's standard library (cached per process)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = tuple(str(root / f"{m}.py") for m in MODULES if (root / f"{m}.py").is_file())
    if not files:
        raise FileNotFoundError(f"none of the corpus's modules is under {root}")
    ids = encode("".join(Path(f).read_text(encoding="utf-8") for f in files))
    cut = int(0.9 * len(ids))
    return Corpus(ids[:cut], ids[cut:], files)


def batches(seed: int, b: int, s: int,
            split: str = "train") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless (inputs, targets) batches, each (b, s) int64, targets shifted by one character;
    window starts drawn uniformly from ``seed`` (the same sequence in every process, so that
    data-parallel ranks can each take their rows of one global batch)."""
    data = corpus().split(split)
    g = torch.Generator().manual_seed(seed)
    while True:
        yield _gather(data, torch.randint(0, len(data) - s, (b,), generator=g), s)


def unigram_loss(split: str = "val") -> float:
    """Cross-entropy (nats per character) on ``split`` of the unigram model fitted on the
    train split (character frequencies, add-one smoothed): the bar a language model beats."""
    c = corpus()
    counts = torch.bincount(c.train, minlength=VOCAB).double() + 1.0
    logp = (counts / counts.sum()).log()
    return float(-logp[c.split(split)].mean())
