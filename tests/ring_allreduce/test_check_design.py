"""Lesson 06's reasoning and design checks: the size where the ring overtakes the tree (right
in several styles; bits, seconds, swapped α and β, log2 n, a one-way tree named) and the
gradient bucket size, run with the lesson's hooks on real workers (one bucket per gradient,
one bucket for all, a fixed size, a fraction named)."""
import math

import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed

NB = "06_ring_allreduce"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------- task 3: the crossover

def crossover_by_bisection(n, alpha, beta):
    """Another right style: find where the two times meet, numerically."""
    L = math.ceil(math.log2(n))

    def tree_minus_ring(S):
        return 2 * L * (alpha + S * beta) - (2 * (n - 1) * alpha + 2 * (n - 1) / n * S * beta)
    if tree_minus_ring(0) >= 0:
        return 0
    lo, hi = 0.0, 1.0
    while tree_minus_ring(hi) < 0:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tree_minus_ring(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def right(n, a, b):
    L = math.ceil(math.log2(n))
    return max(0.0, (n - 1 - L) * a / ((L - (n - 1) / n) * b))


def test_tree_ring_crossover_right_answers_pass(solution, capsys):
    check.tree_ring_crossover(crossover_by_bisection)
    assert capsys.readouterr().out.count("✔ tree_ring_crossover: passed") == 1


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda n, a, b: None, "returned None"),
    (lambda n, a, b: 8 * right(n, a, b), "size in bits"),
    (lambda n, a, b: right(n, b, a), "swapped"),
    (lambda n, a, b: 2 * math.ceil(math.log2(n)) * (a + right(n, a, b) * b), "in seconds"),
    (lambda n, a, b: max(0.0, (n - 1 - math.log2(n)) * a / ((math.log2(n) - (n - 1) / n) * b)),
     "not log2 n"),
    (lambda n, a, b: max(0.0, (2 * (n - 1) - math.ceil(math.log2(n))) * a
                         / ((math.ceil(math.log2(n)) - 2 * (n - 1) / n) * b)), "only reduces"),
    (lambda n, a, b: 0.0, "here it has fewer"),
    (lambda n, a, b: 2e-4 / (1.25 * b), "set the tree's time equal"),
    (lambda n, a, b: 40000.0, "right for n = 4 but not for n = 8"),
])
def test_tree_ring_crossover_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.tree_ring_crossover(wrong)


# ------------------------------------------------------------ task 4: buckets

def bucket_exact(grads, n, alpha, beta, compute):
    """Another right style: every size that makes another partition, the best in the model."""
    def partition(size):
        out, current = [], []
        for g in grads:
            if sum(current) >= size:
                out.append(current)
                current = []
            current.append(g)
        return out + [current]

    def step_time(size):
        network, produced = 0.0, 0
        for bucket in partition(size):
            produced += sum(bucket)
            network = max(network, compute * produced) + 2 * (n - 1) * (
                alpha + sum(bucket) * beta / n)
        return network
    candidates = {sum(grads[i:j]) for i in range(len(grads)) for j in range(i + 1, len(grads) + 1)}
    return min(sorted(candidates), key=step_time)


def bucket_looked_up(grads, n, alpha, beta, compute):
    """The best sizes of the prompt's three machines, found by trial and kept by n."""
    return {4: 32768, 3: 921600, 5: 10240}[n]


def bucket_looked_up_or_default(grads, n, alpha, beta, compute):
    return {(4, 2e-5): 32768, (3, 2e-4): 921600, (5, 4e-5): 10240}.get((n, alpha), 25 << 20)


def test_bucket_bytes_right_answers_pass(solution, capsys):
    check.bucket_bytes(bucket_exact)
    check.bucket_bytes(bucket_exact, seed=5)
    out = capsys.readouterr().out
    assert out.count("✔ bucket_bytes: passed") == 2 and "the hooks launched" in out
    assert "4 networks and machines the prompt does not show (1 run for real)" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda *args: None, "returned None"),
    (lambda *args: 1, "too many small buckets"),
    (lambda *args: 25 << 20, "one bucket: its allreduce can start only when backward has"),
    (lambda *args: 65536, r"3 ranks.*too many small buckets: every allreduce pays .* 800 µs"),
    (lambda *args: 0.5, "whole number of bytes"),
    (bucket_looked_up, r"raised KeyError.*budgets the prompt never showed: a plan must be a "
                       r"function of its inputs"),
    (bucket_looked_up_or_default, r"one bucket: .*a network and machine the prompt does not "
                                  r"show: a plan must be a function of its inputs"),
    (lambda *args: 32768, r"yours is \d+% slower.*the same bucket size, 32768, for all \d+ networks and machines"),
])
def test_bucket_bytes_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.bucket_bytes(wrong)
