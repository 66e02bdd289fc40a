"""Lesson 04's reasoning and design checks: the tree gather's time (right in several styles;
messages that never grow, the flat gather, powers of two only, queued rounds named) and the
pipelined broadcast's pieces (run on real workers; one piece, a constant, too few pieces,
a fraction named)."""
import math

import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed

NB = "04_message_passing"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------ task 5: tree gather

def tree_by_rounds(n, nbytes, alpha, beta):
    """Another right style: simulate the rounds, each as long as its longest message."""
    held, t, k = [1] * n, 0.0, 0
    while 2 ** k < n:
        longest = 0
        for r in range(2 ** k, n, 2 ** (k + 1)):
            held[r - 2 ** k] += held[r]
            longest = max(longest, held[r])
        t += alpha + longest * nbytes * beta
        k += 1
    return np.float64(t)


def test_tree_gather_time_right_answers_pass(solution, capsys):
    check.tree_gather_time(tree_by_rounds)
    assert capsys.readouterr().out.count("✔ tree_gather_time: passed") == 1


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda n, S, a, b: None, "returned None"),
    (lambda n, S, a, b: math.ceil(math.log2(n)) * (a + S * b) if n > 1 else 0.0,
     "messages grow from round to round"),
    (lambda n, S, a, b: (n - 1) * (a + S * b), "flat gather"),
    (lambda n, S, a, b: math.ceil(math.log2(n)) * a + (2 ** math.ceil(math.log2(n)) - 1) * S * b,
     "power of two"),
    (lambda n, S, a, b: math.ceil(math.log2(n)) * a + n * S * b, "own value does not travel"),
    (lambda n, S, a, b: math.log2(n) * a + (n - 1) * S * b, "whole number"),
    (lambda n, S, a, b: 3 * a + (n - 1) * S * b, r"right for n = 5, n = 8 but not for n = 1"),
])
def test_tree_gather_time_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.tree_gather_time(wrong)


def test_tree_gather_time_names_queued_rounds():
    def queued(n, S, a, b):                 # every message of a round one after another
        t, k = 0.0, 0
        while 2 ** k < n:
            t += sum(a + min(2 ** k, n - r) * S * b for r in range(2 ** k, n, 2 ** (k + 1)))
            k += 1
        return t
    with pytest.raises(CheckFailed, match="longest message, not the sum"):
        check.tree_gather_time(queued)


# ------------------------------------------------------- task 6: pipeline chunks

def pieces_by_search(n, nbytes, alpha, beta):
    """Another right style: try every number of pieces in the α–β model."""
    return min(range(1, 2000), key=lambda k: (n - 2 + k) * (alpha + nbytes / k * beta))


PROMPT_MACHINES = {(4, 4_000_000): 13, (3, 262_144): 1, (4, 2_000_000): 18}


def pieces_looked_up(n, nbytes, alpha, beta):
    """The prompt's machines, each found by trial at the prompt and kept in a table."""
    return PROMPT_MACHINES[(n, nbytes)]


def test_pipeline_chunks_right_answers_pass(solution, capsys):
    check.pipeline_chunks(pieces_by_search)
    check.pipeline_chunks(pieces_by_search, seed=11)
    out = capsys.readouterr().out
    assert out.count("✔ pipeline_chunks: passed") == 2 and "machines the prompt does not show" in out
    assert "messages" in out and "fastest" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda n, S, a, b: 1, "in one piece each rank must receive the whole message"),
    (lambda n, S, a, b: 16, r"too many pieces.*the same number of pieces, 16, for all \d+ machines"),
    (lambda n, S, a, b: n, "too few pieces"),
    (lambda n, S, a, b: math.sqrt((n - 2) * S * b / a), "whole number"),
    (lambda n, S, a, b: math.inf, r"returned inf; .*whole number of pieces"),   # no crash
    (lambda n, S, a, b: S // 8, "not run: the α–β model alone rules it out"),
    (lambda n, S, a, b: S, "has only"),
    (pieces_looked_up, r"raised KeyError.*budgets the prompt never showed: a plan must be a "
                       r"function of its inputs"),
    (lambda n, S, a, b: PROMPT_MACHINES.get((n, S), 13),
     r"a machine the prompt does not show: a plan must be a function of its inputs"),
])
def test_pipeline_chunks_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.pipeline_chunks(wrong)
