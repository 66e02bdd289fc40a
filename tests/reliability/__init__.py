"""Reliability under faults, soak and bad input: `pytest -m reliability tests/reliability`."""
