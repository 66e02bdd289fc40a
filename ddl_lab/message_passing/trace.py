"""What ``comm_trace`` records (lesson 04): every message a run sent, for the sequence
diagrams of ``plots.py``."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Message", "Trace", "join_records"]


@dataclass(frozen=True)
class Message:
    """One message: who sent it to whom, its tag, the operation, its size, when."""

    src: int
    dst: int
    tag: int
    op: str              # "send" for point to point, else the collective
    nbytes: int
    sent: float          # seconds, when the send started
    arrived: float       # seconds, when its last byte was read at dst (nan: never)


@dataclass
class Trace:
    """What ``comm_trace`` returns: the results in rank order and every message sent."""

    results: list
    messages: list[Message]

    def ops(self) -> list[str]:
        """The operations in the order they first sent a message."""
        return list(dict.fromkeys(m.op for m in sorted(self.messages, key=lambda m: m.sent)))

    def select(self, op: str) -> list[Message]:
        return [m for m in self.messages if m.op == op]



def join_records(records: list[dict]) -> list[Message]:
    """Every rank's ``Comm.records()`` joined into messages, times from the first send."""
    arrived = {(src, rec["rank"], seq): t for rec in records for src, seq, t in rec["arrived"]}
    sent = [(rec["rank"], *s) for rec in records for s in rec["sent"]]
    t0 = min((s[-1] for s in sent), default=0.0)
    return sorted((Message(src, dst, tag, op, nbytes, t - t0,
                           arrived.get((src, dst, seq), float("nan")) - t0)
                   for src, dst, seq, tag, op, nbytes, t in sent), key=lambda m: m.sent)
