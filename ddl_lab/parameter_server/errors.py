"""What can go wrong with a parameter server (lesson 07): one base error and two kinds."""
from __future__ import annotations

__all__ = ["ParameterServerError", "ShardDied", "ShardLost"]


class ParameterServerError(RuntimeError):
    """A shard, a replica or the coordinator failed; the message says which and why.
    ``not_implemented``: the code it ran raised NotImplementedError (a stub not written yet)."""

    def __init__(self, message: str, not_implemented: bool = False):
        super().__init__(message)
        self.not_implemented = not_implemented


class ShardDied(ParameterServerError):
    """A shard's process died: its slice of θ is gone, so the run cannot go on."""


class ShardLost(ParameterServerError):
    """Seen from a client: a shard closed the connection (its process died or stopped)."""
