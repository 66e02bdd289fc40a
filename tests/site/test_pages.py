"""The site's pages from small notebooks made here: a broken lesson, a missing figure or a
stale executed copy fails the build with the file named; widgets become static, answers
stay sealed (ddl_lab/tools/site)."""
import json
from pathlib import Path

import pytest

from ddl_lab.active import Question, Quiz, seal_choice, seal_text
from ddl_lab.tools.site import SiteError, pages, panels

ROOT = Path(__file__).resolve().parents[2]
LINKS = "```{admonition} Run it live\n```"


def _code(source, outputs=(), count=1, tags=()):
    return {"cell_type": "code", "id": f"c{abs(hash(source)) % 10**8}", "source": source,
            "execution_count": count, "outputs": list(outputs), "metadata": {"tags": list(tags)}}


def _md(source):
    return {"cell_type": "markdown", "id": f"m{abs(hash(source)) % 10**8}", "source": source,
            "metadata": {}}


def _nb(cells, widgets=None):
    meta = {"widgets": {panels.STATE: {"state": widgets}}} if widgets else {}
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def _course(tmp_path, lesson, executed):
    """A course folder with one lesson (sources without outputs) and its executed copy."""
    (tmp_path / "lessons").mkdir(parents=True)
    (tmp_path / "run").mkdir()
    src = json.loads(json.dumps(executed))
    for c in src["cells"]:
        if c["cell_type"] == "code":
            c["outputs"], c["execution_count"] = [], None
    src["metadata"] = {}
    (tmp_path / "lessons" / f"{lesson}.ipynb").write_text(json.dumps(src))
    (tmp_path / "run" / f"{lesson}.ipynb").write_text(json.dumps(executed))
    return tmp_path


def _stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def _view(mid):
    return {"output_type": "display_data", "metadata": {},
            "data": {panels.VIEW: {"model_id": mid, "version_major": 2, "version_minor": 0}}}


def _model(name, **state):
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": state}


PNG = "iVBORw0KGgo" + "A" * 200


def test_a_lesson_that_failed_is_named_with_its_cell(tmp_path):
    err = {"output_type": "error", "ename": "ValueError", "evalue": "boom", "traceback": []}
    root = _course(tmp_path, "03_x", _nb([_md("# 03 · X"), _code("1/0", [err])]))
    with pytest.raises(SiteError, match=r"run/03_x\.ipynb, cell 1: .*ValueError: boom"):
        pages.lesson_page(root, root / "run", "03_x", LINKS)


def test_an_error_the_lesson_expects_is_shown(tmp_path):
    err = {"output_type": "error", "ename": "WorkerError", "evalue": "rank 2", "traceback": []}
    root = _course(tmp_path, "03_x", _nb([_md("# 03 · X"),
                                          _code("bad()", [err], tags=["raises-exception"])]))
    page = pages.lesson_page(root, root / "run", "03_x", LINKS)
    assert page["cells"][2]["outputs"] == [err]


def test_a_missing_figure_is_named(tmp_path):
    root = _course(tmp_path, "03_x", _nb([_md("# 03 · X\n\n![ring](figures/ring.png)")]))
    with pytest.raises(SiteError, match=r"03_x\.ipynb, cell 0: missing figure figures/ring\.png"):
        pages.lesson_page(root, root / "run", "03_x", LINKS)
    (root / "lessons" / "figures").mkdir()
    (root / "lessons" / "figures" / "ring.png").write_bytes(b"png")
    assert pages.lesson_page(root, root / "run", "03_x", LINKS)["cells"][1]["source"] == LINKS


def test_a_missing_or_stale_executed_copy_is_named(tmp_path):
    root = _course(tmp_path, "03_x", _nb([_md("# 03 · X"), _code("x = 1", [])]))
    (root / "lessons" / "03_x.ipynb").write_text(json.dumps(_nb([_md("# 03 · X"),
                                                                 _code("x = 2", [])])))
    with pytest.raises(SiteError, match=r"run/03_x\.ipynb was executed from another version"):
        pages.lesson_page(root, root / "run", "03_x", LINKS)
    (root / "run" / "03_x.ipynb").unlink()
    with pytest.raises(SiteError, match=r"run/03_x\.ipynb: no executed copy"):
        pages.lesson_page(root, root / "run", "03_x", LINKS)


def test_a_copy_run_smaller_by_the_tests_is_stale_except_for_the_tests_own_site(tmp_path):
    from ddl_lab.tools.site.build import SMALLER, stale_lessons
    ran = _nb([_md("# 03 · X"), _code("EPOCHS = 8", [_stream("8")])])
    root = _course(tmp_path, "03_x", ran)
    assert stale_lessons(root, root / "run") == []
    ran["metadata"]["ddl_lab"] = {SMALLER: ["EPOCHS = 8 -> EPOCHS = 2"]}     # tests/browser's
    (root / "run" / "03_x.ipynb").write_text(json.dumps(ran))
    assert stale_lessons(root, root / "run") == ["03_x"]          # ddl-lab site runs it whole
    assert stale_lessons(root, root / "run", smaller_ok=True) == []
    ran["cells"][1]["source"] = "EPOCHS = 2"                      # its own code, not put back
    (root / "run" / "03_x.ipynb").write_text(json.dumps(ran))
    assert stale_lessons(root, root / "run", smaller_ok=True) == ["03_x"]


def test_a_lesson_that_stopped_early_is_named(tmp_path):
    root = _course(tmp_path, "03_x", _nb([_md("# 03 · X"), _code("x = 1", [], count=None)]))
    with pytest.raises(SiteError, match=r"cell 1: not executed"):
        pages.lesson_page(root, root / "run", "03_x", LINKS)


def _panel_state(outputs):
    return {"p": _model("VBoxModel", children=["IPY_MODEL_t", "IPY_MODEL_h", "IPY_MODEL_o"]),
            "t": _model("HTMLModel", value="<b>A ring, step by step</b>"),
            "h": _model("HBoxModel", children=["IPY_MODEL_s", "IPY_MODEL_b"]),
            "s": _model("IntSliderModel", description="ranks n", value=4),
            "b": _model("ButtonModel", description="Run on the workers", button_style="primary"),
            "o": _model("OutputModel", outputs=outputs)}


def test_a_panel_shows_its_default_run_under_a_note_naming_its_controls(tmp_path):
    fig = {"output_type": "display_data", "metadata": {}, "data": {"image/png": PNG}}
    nb = _nb([_md("# 03 · X"), _code("experiment(...)", [_view("p")])],
             _panel_state([_stream("step 4\n"), fig]))
    page = pages.lesson_page(_course(tmp_path, "03_x", nb), tmp_path / "run", "03_x", LINKS)
    note, *shown = page["cells"][2]["outputs"]
    assert "A ring, step by step" in note["data"]["text/markdown"]
    assert "**ranks n**" in note["data"]["text/markdown"]
    assert "Run on the workers" not in note["data"]["text/markdown"]
    assert shown == [_stream("step 4\n"), fig]
    assert "widgets" not in page["metadata"]


def test_a_panel_without_its_figure_fails_the_build(tmp_path):
    nb = _nb([_md("# 03 · X"), _code("experiment(...)", [_view("p")])], _panel_state([]))
    with pytest.raises(SiteError, match=r"cell 1: the experiment panel's saved state holds no "
                                        r"output \(its default run's figure is missing\)"):
        pages.lesson_page(_course(tmp_path, "03_x", nb), tmp_path / "run", "03_x", LINKS)
    nb = _nb([_md("# 03 · X"), _code("experiment(...)", [_view("gone")])], _panel_state([]))
    with pytest.raises(SiteError, match=r"cell 1: a widget without saved state"):
        pages.lesson_page(_course(tmp_path / "b", "03_x", nb), tmp_path / "b" / "run", "03_x",
                          LINKS)


def test_a_box_whose_button_was_never_pressed_names_the_button(tmp_path):
    state = {"p": _model("VBoxModel", children=["IPY_MODEL_b", "IPY_MODEL_o"]),
             "b": _model("ButtonModel", description="run: host B leaves", button_style=""),
             "o": _model("OutputModel", outputs=[])}
    nb = _nb([_md("# 03 · X"), _code("widgets.VBox([leave, out])", [_view("p")])], state)
    page = pages.lesson_page(_course(tmp_path, "03_x", nb), tmp_path / "run", "03_x", LINKS)
    (note,) = page["cells"][2]["outputs"]
    assert "**run: host B leaves** runs this experiment" in note["data"]["text/markdown"]


def _widget_state(box) -> dict:
    """The saved state of ``box`` and every widget below it, as a notebook stores it."""
    state = {}

    def visit(w):
        s = w.get_state()                        # children as "IPY_MODEL_<id>", as saved
        state[w.model_id] = _model(s["_model_name"], **s)
        for c in getattr(w, "children", ()):
            visit(c)
    visit(box)
    return state


def test_a_quiz_shows_its_questions_never_its_answers(tmp_path):
    why = "Because the ring sends 2(n-1)/n of S"
    q = Question("How much does a rank send?", seal_text(why), salt="s",
                 choices=("S", "2(n-1)/n S"), answer=seal_choice("s", "2(n-1)/n S"))
    quiz = Quiz([q])
    quiz.items[0].control.value = "2(n-1)/n S"
    quiz.items[0].check()                          # the feedback line now holds the answer
    nb = _nb([_md("# 03 · X"), _code("quiz(q)", [_view(quiz.box.model_id)]),
              _code("p.reveal(3, why='the measured answer')", [_stream("you predicted 1")])],
             _widget_state(quiz.box))
    page = pages.lesson_page(_course(tmp_path, "03_x", nb), tmp_path / "run", "03_x", LINKS)
    text = json.dumps(page, ensure_ascii=False)
    assert "How much does a rank send?" in text and "2(n-1)/n S" in text
    assert why not in text and "right" not in text
    assert "the measured answer" not in text and "you predicted" not in text
    assert pages.SEALED in text


def test_launch_links_come_from_the_repository_url():
    line = pages.launch_links("lessons/06_ring_allreduce.ipynb", "https://github.com/o/r.git",
                              "main", "https://hub.example.org/")
    assert ("https://mybinder.org/v2/gh/o/r/main?labpath=lessons/06_ring_allreduce.ipynb"
            in line)
    assert ("https://hub.example.org/hub/user-redirect/git-pull?repo=https://github.com/o/r"
            "&branch=main&urlpath=lab/tree/r/lessons/06_ring_allreduce.ipynb") in line
    assert "`make lab`" in line and "`make test`" in line
    assert "mybinder" not in pages.launch_links("lessons/x.ipynb", "", "main", "")


def test_lessons_and_exercises_are_found_in_their_folders(tmp_path):
    for name in ("00_a", "15_capstone", "10_memory", "notes", "1_bad"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    assert pages.stems(tmp_path) == ["00_a", "10_memory", "15_capstone"]


def test_an_exercise_page_says_what_each_check_judges():
    name = next(p.stem for p in sorted((ROOT / "exercises").glob("06_*.ipynb")))
    page = pages.exercise_page(ROOT, name, LINKS)
    judged = [c["source"] for c in page["cells"]
              if isinstance(c["source"], str) and c["source"].startswith("**What `check.")]
    assert any("check.ring_allreduce" in j for j in judged)
    assert all(len(j.split("** — ", 1)[1]) > 20 for j in judged)


def test_the_command_names_the_lesson_it_has_no_executed_copy_of(tmp_path, capsys):
    from ddl_lab.__main__ import main
    first = pages.stems(ROOT / "lessons")[0]
    assert main(["site", "--no-execute", "--executed", str(tmp_path / "none"),
                 "--out", str(tmp_path / "site")]) == 1
    err = capsys.readouterr().err
    assert f"none/{first}.ipynb: no executed copy of lessons/{first}.ipynb" in err
    assert not (tmp_path / "site").exists()


def test_the_instructors_page_shows_every_rubric_as_written():
    """Each justification's rubric, its Markdown characters escaped: rendered, the page says
    what solutions/rubrics.toml says (``J − J*``, ``max_examples``), no emphasis made up."""
    from markdown_it import MarkdownIt

    from ddl_lab.tools.grading.rubrics import load
    from ddl_lab.tools.site.build import _instructors
    found = load(ROOT)
    page = _instructors((ROOT / "README.md").read_text(), ROOT)
    html = MarkdownIt("commonmark").render(page)
    text = " ".join(html.split())
    assert found
    for r in found.values():
        assert f"{r.exercise} · {r.task} ({r.points:g} points)" in text
        for said in (r.full, *(s for _, s in r.partial)):
            plain = " ".join(said.split()).replace("&", "&amp;").replace("<", "&lt;") \
                .replace(">", "&gt;").replace('"', "&quot;")
            assert plain in text, (r.task, plain[:80])


def test_the_site_waits_for_this_runs_browser_lessons_and_no_others(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from . import conftest as C
    monkeypatch.setattr(C, "EXECUTED", tmp_path)
    monkeypatch.setattr(C, "WAIT_S", 0.2)

    def item(lesson, name=C.LESSON_TEST):
        return SimpleNamespace(originalname=name, callspec=SimpleNamespace(params={"lesson": lesson}))
    run = SimpleNamespace(items=[item("00_a"), item("01_b"), item("x", name="test_other")])
    (tmp_path / "00_a.run").write_text("this run")
    (tmp_path / "01_b.run").write_text("an earlier run")      # its lesson still runs now
    assert C.wait_for_the_browser(run, "this run") == ["01_b"]
    (tmp_path / "01_b.run").write_text("this run")
    assert C.wait_for_the_browser(run, "this run") == []
    assert C.wait_for_the_browser(SimpleNamespace(items=[item("x", name="test_other")]), "r") == []
