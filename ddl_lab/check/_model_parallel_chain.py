"""Lesson 09's checks: who sent what in a pipeline. On the workers, every send and receive
of a stage is logged (``p2p_log``), and a message that cannot be right — None, to or from a
rank that is not a neighbour, an input's gradient sent forward — raises at once instead of
hanging. In the parent, the logs say what shape the learner's pipeline took: a star through
rank 0 or a shortcut to the last stage (``off_the_chain``, "pipeline pieces go down the
chain"), and an order that is not GPipe's, with the idle time it costs (``gpipe_fault``)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator

GUARD = "[neighbours]"


@contextmanager
def p2p_log(logdir: str, rank: int, prev: int | None, nxt: int | None, d_in: int,
             d_out: int) -> Iterator[None]:
    """Worker, while the learner's code runs: every send/recv is written to a file (a line
    each, flushed), and a message that cannot be right raises at once instead of hanging:
    None, to or from a rank that is not a neighbour, or the input's gradient sent forward."""
    from ddl_lab.runtime.wiretap import Wiretap
    peers = {prev, nxt}

    def judge(call: str, sending: bool, tensor: Any, peer: Any) -> None:
        if tensor is None:
            raise ValueError(f"{GUARD}none|{rank}|rank {rank} called dist.{call} with None")
        if sending and peer == nxt and _last_dim(tensor) == d_in != d_out:
            raise ValueError(f"{GUARD}forward|{rank}|rank {rank} sent a tensor shaped like "
                             f"its input's gradient to nxt = {peer}")
        if peer not in peers - {None}:
            raise ValueError(f"{GUARD}{'stray-send' if sending else 'stray'}|{rank}|rank "
                             f"{rank} called dist.{call} with rank {peer!r}, which is not one of "
                             f"its neighbours {sorted(peers - {None})}")

    def logged(op: Any, args: tuple) -> None:
        if op.op not in ("send", "recv"):
            return
        peer = op.dst if op.op == "send" else op.src
        log.write(f"{op.op} {peer}\n")
        log.flush()
        judge(op.call or op.op, op.op == "send", args[0][0], peer)
    with open(os.path.join(logdir, f"rank{rank}.log"), "w") as log, Wiretap(on_op=logged):
        yield


def _last_dim(t: Any) -> int | None:
    """The last size of a tensor, or of the tensor a ``send_tensor`` header announces."""
    if t.is_floating_point():
        return int(t.shape[-1]) if t.dim() else None
    if t.dim() == 1 and t.numel() == 8 and 0 < int(t[1]) <= 6:       # stages.send_tensor's header
        return int(t[1 + int(t[1])])
    return None


def read_log(logdir: str, rank: int) -> list[tuple[str, ...]]:
    path = os.path.join(logdir, f"rank{rank}.log")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(ln.split(" ")) for ln in f.read().split("\n") if ln.strip()]


def read_logs(logdir: str, p: int) -> list[list[tuple[str, ...]]]:
    return [read_log(logdir, r) for r in range(p)]


_CHAIN = ("pipeline pieces go down the chain: activations from stage s to s + 1 (nxt), "
          "gradients back from s + 1 to s (prev), one hop at a time")


def off_the_chain(said: str, logs: list, p: int) -> str:
    """Messages to or from ranks that are not neighbours, named by the shape they take:
    a star through rank 0, activations sent straight to the last stage, or another shortcut."""
    strays = [(r, op, int(peer)) for r, log in enumerate(logs) for op, peer in log
              if peer.isdigit() and abs(int(peer) - r) != 1]
    if any(r >= 2 and peer == 0 for r, _, peer in strays):
        return (f"{said}: messages routed through rank 0, a star — {_CHAIN}; no stage talks "
                "to any rank but prev and nxt.")
    if any(op == "send" and peer == p - 1 for _, op, peer in strays):
        return (f"{said}: activations sent straight to the last stage, skipping the stages "
                f"between — {_CHAIN}.")
    return f"{said}: a stage talks only to prev and nxt — {_CHAIN}."


def _directions(log: list[tuple[str, ...]], rank: int) -> str:
    """Each message of a stage as 'F' (the forward pass: from prev, to nxt) or 'B'."""
    forward = {("recv", str(rank - 1)), ("send", str(rank + 1))}
    return "".join("F" if tuple(msg) in forward else "B" for msg in log)


def _ops(directions: str, m: int) -> list[tuple[str, int]] | None:
    """The order of a stage's operations read off its messages ("F", i) / ("B", i), every
    micro-batch sending as many messages as the others; None if they do not split so."""
    per = {d: directions.count(d) // m for d in "FB"}
    if any(directions.count(d) != per[d] * m or not per[d] for d in "FB"):
        return None
    seen, order = {"F": 0, "B": 0}, []
    for d in directions:
        op = (d, seen[d] // per[d])
        seen[d] += 1
        if op not in order:
            order.append(op)
    return order


def gpipe_fault(got: list[dict], spec: dict) -> str | None:
    """None if every stage ran GPipe's order — every forward message before any backward
    one — else what the learner's order was and the idle time it costs, counted in slots."""
    from ddl_lab.model_parallel.interleaved import slot_makespan
    p, m = spec["p"], spec["m"]
    dirs = [_directions(g["log"], r) for r, g in enumerate(got)]
    late = [r for r, d in enumerate(dirs) if "B" in d and "F" in d[d.index("B"):]]
    if not late:
        return None
    r, orders = late[0], [_ops(d, m) for d in dirs]
    head = (f"the gradients are right, but the order is not GPipe's: rank {r} sent or received "
            "a gradient before its last activation")
    if any(o is None for o in orders):
        return head + ". GPipe runs every micro-batch's forward, then every backward."
    slots, gpipe = slot_makespan([[(k, i, 0) for k, i in o] for o in orders], 1), 2 * (m + p - 1)
    shown = " ".join(f"{k}{i}" for k, i in orders[r])
    idle = (f"each stage idles {1 - 2 * m / slots:.0%} of the step instead of GPipe's "
            f"(p − 1)/(m + p − 1) = {(p - 1) / (m + p - 1):.0%}")
    if all(o == [op for i in range(m) for op in (("F", i), ("B", i))] for o in orders):
        return (f"{head} — each micro-batch's backward ran right after its forward ({shown}), "
                f"so only one stage is ever busy: counted in slots (every forward and backward "
                f"one slot) the step takes 2·p·m = {slots} slots instead of GPipe's "
                f"2(m + p − 1) = {gpipe}, and {idle}. Run every forward, then every backward.")
    if slots > gpipe:
        return (f"{head} (rank {r} ran {shown}): counted in slots the step takes {slots} slots "
                f"instead of GPipe's 2(m + p − 1) = {gpipe}, and {idle}. Run every forward, "
                "then every backward.")
    return (f"{head} (rank {r} ran {shown}): as short as GPipe's {gpipe} slots, a 1F1B-like "
            "order (task 2's, which keeps fewer activations) — this task asks for GPipe's: "
            "every forward, then every backward.")
