"""The judge's parts without a notebook: fingerprints name what changed, the instructor's
seed gives other cases (and only under grading), the scan flags forgeries and no solution,
the handover round trip reaches the check's verdict in a judge."""
import pytest

from ddl_lab.check import _core, _diagnose, _record
from ddl_lab.tools.grading.fingerprint import changes, fingerprint
from ddl_lab.tools.grading.handover import judged
from ddl_lab.tools.grading.scan import cell_flags, flags

from .sample_class import GD, solved, tasks_of
from .test_pieces import COURSE


def test_a_fingerprint_names_what_was_replaced(monkeypatch):
    before = fingerprint()
    assert changes(before, fingerprint()) == []
    monkeypatch.setattr(_record, "write", lambda *args, **kwargs: None)
    monkeypatch.setattr(_core.CheckFailed, "_render_traceback_", lambda self: [])
    said = changes(before, fingerprint())
    assert said == ["ddl_lab.check._core.CheckFailed._render_traceback_ was replaced or changed",
                    "ddl_lab.check._record.write was replaced or changed"]
    import torch.distributed as dist
    monkeypatch.setattr(dist, "all_reduce", lambda *args, **kwargs: None)
    assert "torch.distributed.all_reduce was replaced or changed" in \
        changes(before, fingerprint())


def test_the_instructors_seed_draws_other_cases_only_when_grading(monkeypatch):
    def drawn():
        return [c.rng.random() for c in _diagnose.Cases("t", 0, draws=3,
                                                        draw=lambda rng: {"x": rng.random()})]
    home = drawn()
    assert drawn() == home                          # the same cases every run at home
    monkeypatch.setattr(_diagnose, "GRADING_SEED", 918273645)
    graded = drawn()
    assert graded == drawn() and not set(graded) & set(home)
    monkeypatch.setattr(_diagnose, "GRADING_SEED", 7)
    assert drawn() != graded


def test_the_scan_flags_forgeries_and_no_solution():
    for stem in COURSE:
        assert flags(solved(stem)) == [], stem
    forged = '''import sys, gc
from ddl_lab.check import _record
import torch.distributed as dist
dist.all_reduce = print
f = sys._getframe(1).f_back
gc.get_referrers(_record)
open("/proc/1/environ").read()'''
    said = " | ".join(what for _, what in cell_flags(forged, set()))
    for phrase in ("imports ddl_lab.check _record", "assigns dist.all_reduce",
                   "sys._getframe", "f_back", "gc referrers", "'/proc/1/environ'"):
        assert phrase in said, phrase
    assert cell_flags("import numpy as np\ntheta = np.zeros(3)\ntheta[0] = 1", set()) == []


@pytest.mark.slow
def test_a_judged_check_passes_a_right_answer_and_fails_a_wrong_one(solution, capsys):
    task, fn = tasks_of(GD)[0]
    judged(task, solution(GD, fn))
    assert f"✔ {task}: judged — passed" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="twice too large"):
        judged(task, lambda theta, X, y: 2 * X.T @ (X @ theta - y) / len(y))
    def stub(theta, X, y):
        raise NotImplementedError("replace this line with your code")
    with pytest.raises(AssertionError, match="not implemented yet"):
        judged(task, stub)


@pytest.mark.slow
def test_a_judge_that_stays_silent_is_stopped_at_its_deadline(tmp_path):
    """The learner's function loops forever inside the judge: the task ends with a message
    naming the limit, and the judge's process is gone (no orphan keeps a core busy)."""
    from ddl_lab.tools.grading import handover
    from ddl_lab.tools.grading.judge import Judge
    task, _ = tasks_of(GD)[0]

    def forever(theta, X, y):
        while True:
            pass
    handover.take(task, forever)
    handover.save(str(tmp_path / "payload.bin"))
    judge = Judge(None, tmp_path / "judge.log")
    judge.start()
    process = judge.proc
    answer = judge.judge_all([(tmp_path / "payload.bin", 0, task)], 2.0)[task]
    assert answer["outcome"] == "ended"
    assert "ran past the per-cell limit of 2 s" in answer["message"]
    assert process.poll() is not None
