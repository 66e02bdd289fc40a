"""Lesson 15, part 2 (issue 39): the transformer brief. The meter measures what it says
(bytes per step by the ring's formula, the peak memory above the model's state, the
curve, text only from the batches handed out); the three naive plans miss the brief with
their figures — plain DDP on memory, one rank on the target within the steps, ZeRO-3 with
no care on bytes — and the check records its figures for the leaderboard on a failure too.
The check names a plan that trains on text it fetched itself, one whose ranks end with
different models, one that talks through a file and one that sets the meter's count back.
The model answer passing is proven by the solution notebook's run (``check.capstone_gpt``)."""
import dataclasses

import pytest

from ddl_lab import check
from ddl_lab.capstone import gpt_plans
from ddl_lab.capstone.transformer import BRIEF, MiB, measure_gpt
from ddl_lab.check import CheckFailed
from ddl_lab.runtime.costs import sent_bytes

P = 809_856                              # GPT(MODEL)'s parameters


def test_the_check_fails_plain_ddp_on_memory_and_records_its_figures(monkeypatch):
    from ddl_lab.check import _record
    seen = []
    monkeypatch.setattr(_record, "SINK", seen.append)
    monkeypatch.setattr("ddl_lab.capstone.transformer.BRIEF",
                        dataclasses.replace(BRIEF, steps=12))
    with pytest.raises(CheckFailed, match=r"peak memory .* MiB > 15\.0 MiB") as failed:
        check.capstone_gpt(gpt_plans.ddp_plan)
    assert "sent per step >" not in str(failed.value)          # within the byte budget
    (entry,) = seen
    assert entry["task"] == "capstone_gpt" and not entry["passed"]
    fig = entry["figures"]
    assert fig["board"] == "capstone_gpt" and fig["within"] is False and fig["steps"] == 12
    assert 16 * P < fig["peak_bytes"] < 30 * MiB              # Adam's 16 B/parameter and more
    ring = sent_bytes("all_reduce", 4, 4 * P)                # + DDP's first broadcast of the model
    assert ring < fig["bytes_per_step"] < ring + sent_bytes("broadcast", 4, 4 * P) / 12 + 1e4
    assert [s for s, _ in fig["curve"]] == list(range(1, 13))          # one loss a step
    assert fig["curve"][0][1] > fig["curve"][-1][1]


def test_one_rank_misses_the_target_within_the_steps():
    r = measure_gpt(gpt_plans.ddp_plan, world_size=1)
    assert r.steps == BRIEF.steps and r.bytes == 0
    assert r.loss > BRIEF.target + 0.05, r.summary()
    assert any("held-out loss" in m for m in r.shortfalls())


def test_careless_zero3_misses_bytes_not_memory_and_trains_as_data_parallelism():
    brief = dataclasses.replace(BRIEF, steps=4)
    r = measure_gpt(gpt_plans.zero3_plan, brief)
    assert abs(r.loss - measure_gpt(gpt_plans.ddp_plan, brief).loss) < 1e-4     # same steps
    assert r.peak < BRIEF.memory, r.summary()
    assert r.bytes_per_step > 1.15 * BRIEF.bytes_per_step        # gathered twice a step
    assert any("sent per step" in m for m in r.shortfalls())


PLANS = """
import torch
from ddl_lab.ml.gpt import lm_loss
from ddl_lab.ml.text import batches as corpus_batches

def own_text(model, batches, wire):
    # trains on windows it draws itself, not on the batches handed out
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    mine = corpus_batches(7, 4, 32)
    for _ in batches:
        x, y = next(mine)
        lm_loss(model(x), y).backward()
        opt.step()
    return model

def through_a_file(model, batches, wire):
    # the ranks average their weights through a file, past the meter
    import os, tempfile
    for x, y in batches:
        pass
    path = os.path.join(tempfile.gettempdir(), f"gpt_{wire.rank}.pt")
    with open(path, "wb") as f:
        torch.save(model.state_dict(), f)
    os.remove(path)
    return model

def sets_the_count_back(model, batches, wire):
    for x, y in batches:
        wire.allreduce(torch.zeros(1000))
    wire._tap.sent = 0.0
    return model

def ranks_disagree(model, batches, wire):
    for x, y in batches:
        break
    with torch.no_grad():
        model.tok.weight += wire.rank
    return model
"""


@pytest.mark.parametrize("plan, words", [("own_text", "rows of text that no rank"),
                                         ("ranks_disagree", "models differ"),
                                         ("through_a_file", "past the meter, through files"),
                                         ("sets_the_count_back", "changed the meter's own count")])
def test_the_check_names_a_plan_past_the_rules(monkeypatch, plan, words):
    from ddl_lab.check import _record
    from tests.conftest import define_cell
    fn = define_cell(PLANS)[plan]
    seen = []
    monkeypatch.setattr(_record, "SINK", seen.append)
    monkeypatch.setattr("ddl_lab.capstone.transformer.BRIEF",
                        dataclasses.replace(BRIEF, steps=3))
    with pytest.raises(CheckFailed, match=words):
        check.capstone_gpt(fn)
    assert seen[-1]["figures"]["within"] is False        # never ranked on the leaderboard
