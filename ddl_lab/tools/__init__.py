"""Course tooling (exercise generator, notebook runner): not for learners' code."""
import sys


def skip_iri_check() -> None:
    """For the course's own tool processes (the command line; the grader, its runners, judges
    and grading kernels): jsonschema, which nbformat imports, imports ``rfc3987_syntax`` for
    its optional IRI format check, and that builds a parser at import — 0.6–0.9 CPU-s in
    every such process. A notebook's schema has no IRI to check, so it is left out (where
    jsonschema was imported already, nothing changes)."""
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)
