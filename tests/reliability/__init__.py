"""Reliability under faults, soak and bad input (issue 19): `pytest -m reliability tests/reliability`."""
