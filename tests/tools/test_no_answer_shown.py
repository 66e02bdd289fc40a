"""A lesson never shows a graded answer (issue 35): every learner function of `solutions/` is
compared with all the code the lessons show — their code cells and every package function a
lesson prints — by the similarity of normalised token streams (`shown_code.py`).

The threshold, 0.75: a copy with other names and layout scores above 0.9; different tasks
written with the same few calls reach 0.71 in this course (measured: exercise 00's
`my_darts_per_rank` against lesson 00's `sum_of_ranks` cell, `my_rank` against lesson 08's
byte counter), and two unrelated functions of a size about 0.3–0.6. No allow-list."""

from ddl_lab.tools.notebooks import ROOT

from .shown_code import closest, learner_functions, shown_units, similarity

THRESHOLD = 0.75


def test_the_measure_tells_a_copy_from_a_stranger():
    shown = '''def ring(t):
    n, r = dist.get_world_size(), dist.get_rank()
    for k in range(n - 1):
        dist.send(t[k], (r + 1) % n)   # on
        dist.recv(t[k + 1], (r - 1) % n)
    return t'''
    renamed = '''def my_ring(x):
    """My answer."""
    size, me = dist.get_world_size(), dist.get_rank()
    for step in range(size - 1):
        dist.send(x[step], (me + 1) % size)
        dist.recv(x[step + 1], (me - 1) % size)
    return x'''
    stranger = '''def my_plan(alpha, beta, nbytes):
    best = min(range(1, 64), key=lambda k: k * alpha + nbytes / k * beta)
    return {"pieces": best, "time": best * alpha}'''
    assert similarity(renamed, shown) > 0.9
    assert similarity(stranger, shown) < 0.5


def test_no_lesson_shows_a_graded_answer():
    shown = [u for lesson in sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
             for u in shown_units(lesson)]
    copies = []
    for solution in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        for answer in learner_functions(solution):
            score, unit = closest(answer, shown)
            if score >= THRESHOLD:
                copies.append(f"{answer.name} ({answer.where}) is {score:.2f} like {unit.name} "
                              f"({unit.where})")
    assert not copies, "lessons show graded answers:\n" + "\n".join(copies)
