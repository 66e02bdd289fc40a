"""Course tooling (exercise generator, notebook runner): not for learners' code."""
