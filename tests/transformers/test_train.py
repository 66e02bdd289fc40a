"""Training the small GPT (lesson 12, transformers): data parallel on 2 and 4 real ranks
equals one process with the global batch; a short run learns more than character
frequencies; the schedule; sampling from the trained weights."""
import math

import pytest
import torch

from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.ml.text import VOCAB
from ddl_lab.runtime.worlds import run_cases
from ddl_lab.transformers import train as T
from tests.ml.test_gpt import one_thread  # noqa: F401 (autouse: one torch thread)

TINY = GPTConfig(vocab=VOCAB, seq=16, hidden=16, heads=2, layers=1)
SHORT = T.TrainConfig(steps=4, batch=8, lr=1e-2, warmup=2, eval_every=2, eval_windows=8)



def test_schedule_warms_up_then_decays_to_its_floor():
    tc = T.TrainConfig(steps=100, lr=1.0, warmup=10, min_lr=0.1)
    assert T.lr_at(0, tc) == pytest.approx(0.1) and T.lr_at(9, tc) == pytest.approx(1.0)
    assert T.lr_at(10, tc) == pytest.approx(1.0) and T.lr_at(100, tc) == pytest.approx(0.1)
    lrs = [T.lr_at(s, tc) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_data_parallel_equals_one_process_with_the_global_batch():
    one = T.train(TINY, SHORT)
    assert len(one.losses) == 4 and [s for s, _ in one.evals] == [2, 4]
    for outcome in run_cases(T.train, [(2, (TINY, SHORT)), (4, (TINY, SHORT))], fn=T.train):
        assert outcome.failure is None, outcome.failure
        runs = outcome.results
        assert [r.world_size for r in runs] == [outcome.n] * outcome.n
        assert all(r.state is None for r in runs[1:])
        for r in runs:
            assert r.losses == pytest.approx(one.losses, rel=1e-5)
            assert [v for _, v in r.evals] == pytest.approx([v for _, v in one.evals], rel=1e-5)
        for name, p in one.state.items():
            torch.testing.assert_close(runs[0].state[name], p, atol=2e-5, rtol=1e-4)
    moved = max((T.model_of(one, TINY).state_dict()[k] - v).abs().max()
                for k, v in T.GPT(TINY, SHORT.seed).state_dict().items())
    assert moved > 1e-3                                      # the steps did change the weights


def test_a_short_run_beats_the_unigram_model():
    cfg = GPTConfig(vocab=VOCAB, seq=32, hidden=32, heads=2, layers=1)
    run = T.train(cfg, T.TrainConfig(steps=150, batch=16, lr=1e-2, warmup=10,
                                      eval_every=75, eval_windows=16))
    assert 2.5 < run.unigram < math.log(VOCAB)
    assert run.val_loss < run.unigram - 0.3, (run.val_loss, run.unigram)
    assert run.losses[-1] < run.losses[0] - 1.0 and run.tokens_per_s > 0
    text = T.sample_text(T.model_of(run, cfg), "def ", 40, seed=1)
    assert text.startswith("def ") and len(text) == 44
    assert text == T.sample_text(T.model_of(run, cfg), "def ", 40, seed=1)


def test_a_batch_that_does_not_split_is_refused():
    bad = run_cases(T.train, [(3, (TINY, SHORT))], fn=T.train)[0]
    assert bad.failure is not None and "does not split evenly over 3 ranks" in bad.failure.text
    with pytest.raises(ValueError, match="only rank 0"):
        T.model_of(T.TrainRun(2))
