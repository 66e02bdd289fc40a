"""Resharding checkpoints (lesson 14, experts, section 5): a GPT trained 3 steps under DP × TP
(2 × 2) on 4 ranks and saved with ``torch.distributed.checkpoint`` resumes under FSDP2 on 2
ranks and in one process, its 5 losses those of one uninterrupted process; the folder holds
one shard file per rank and ``.metadata``, which records each tensor's global shape and
chunks; lesson 11's hand checkpoint is one file."""
import os

import pytest

from ddl_lab.experts import reshard as R
from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.runtime import shared_cluster

CFG = GPTConfig(vocab=32, seq=16, hidden=32, heads=4, layers=2)
SEED, LR, SAVED, MORE = 3, 1e-2, 3, 2
# float32: the layouts add the same numbers in other orders (row-parallel partial sums,
# per-slice means averaged by FSDP's reduce-scatter), ~1e-7 relative each (measured: at most
# 1.4e-7 on these losses of ~3.5 nats); Adam's normalised update carries such differences on,
# so 1e-5 relative leaves room for other CPUs' kernels and stays far below what a lost
# optimizer state changes (~1e-2, the last assertion of the first test).
RTOL = 1e-5


@pytest.fixture(scope="module")
def clusters():
    return {n: shared_cluster(n) for n in (2, 4)}


@pytest.fixture(scope="module")
def saved(clusters, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("dcp"))
    return folder, clusters[4].run(R.train_and_save, R.DP_TP, CFG, SAVED, folder, SEED, LR)


def _close(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(abs(g - w) <= RTOL * abs(w) for g, w in zip(got, want))


def test_saved_under_dp_x_tp_resumes_under_fsdp2_and_in_one_process(clusters, saved):
    folder, runs = saved
    ref = R.one_process_losses(CFG, SAVED + MORE, SEED, LR)
    fsdp = clusters[2].run(R.load_and_continue, R.FSDP, CFG, MORE, folder, SEED, LR)
    one = R.load_and_continue(R.ONE, CFG, MORE, folder, SEED, LR)     # here, no process group
    for run in runs:
        assert _close(run["losses"], ref[:SAVED]), (run["losses"], ref)
    for run in [*fsdp, one]:
        assert run["start"] == SAVED
        assert _close(run["losses"], ref[SAVED:]), (run["losses"], ref)
    # the optimizer state matters: with the model alone the first loss (before any update)
    # is right, the next one is not — Adam's moments and step count were lost
    alone = R.load_and_continue(R.ONE, CFG, MORE, folder, SEED, LR, optimizer=False)
    assert _close(alone["losses"][:1], ref[SAVED:SAVED + 1])
    assert not _close(alone["losses"][1:], ref[SAVED + 1:]), (alone["losses"], ref)


def test_each_rank_wrote_its_shards_and_the_metadata_records_the_layout(saved):
    folder, runs = saved
    wrote = R.what_dcp_wrote(folder)
    assert set(wrote["files"]) == {".metadata"} | {f"__{r}_0.distcp" for r in range(4)}
    assert [list(run["wrote"]) for run in runs] == [[f"__{r}_0.distcp"] for r in range(4)]
    t = wrote["tensors"]
    # Q: rows split by TP (16 each), each half by FSDP over dp (8 each): one chunk per rank
    q = t["model.blocks.0.attn.q.weight"]
    assert q["shape"] == (32, 32)
    assert [(c["offsets"], c["sizes"]) for c in q["chunks"]] == \
        [((r, 0), (8, 32)) for r in (0, 8, 16, 24)]
    assert sorted(c["file"] for c in q["chunks"]) == [f"__{r}_0.distcp" for r in range(4)]
    # the row-parallel projection: columns by TP, rows by FSDP, four 16 × 16 blocks
    proj = t["model.blocks.0.attn.proj.weight"]
    assert sorted(c["offsets"] for c in proj["chunks"]) == [(0, 0), (0, 16), (16, 0), (16, 16)]
    # the embedding, replicated over tp: FSDP's two halves, each written once
    assert [c["sizes"] for c in t["model.tok.weight"]["chunks"]] == [(16, 32), (16, 32)]
    assert t["optim.state.blocks.0.attn.q.weight.exp_avg"]["chunks"] == q["chunks"]
    assert "step" in wrote["objects"]


def test_lesson_11s_hand_checkpoint_is_one_file(clusters, tmp_path):
    runs = clusters[2].run(R.hand_saved, CFG, SAVED, str(tmp_path), SEED, LR)
    assert list(runs[0]["files"]) == ["checkpoint.pt"] and os.listdir(tmp_path) == ["checkpoint.pt"]
