"""The topology stage's error, in a module of its own so that code without the pydantic spec can raise it."""

from __future__ import annotations

from commlens.errors import CommlensError

__all__ = ["TopologyError"]


class TopologyError(CommlensError, ValueError):
    """A topology spec that cannot be built, or a preset that does not exist."""
