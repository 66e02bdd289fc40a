"""Lesson 11's self-check quiz keeps its answers sealed, and the lesson shows it (the same
rules as every lesson's, tests/tools/test_active.py)."""
from tests.tools import test_active as active


def test_the_quiz_seals_its_answers_and_the_lesson_shows_it():
    active.test_lesson_quizzes_seal_their_answers("capstone")
    active.test_the_lesson_shows_its_quiz_and_names_no_answer("capstone")
