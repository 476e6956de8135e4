"""The projection's domain errors."""

from __future__ import annotations

from commlens.errors import CommlensError
from commlens.model import InfeasibleError

__all__ = ["InfeasibleLayoutError", "ProjectionError"]


class ProjectionError(CommlensError, ValueError):
    """A projection that cannot be made (missing hardware figures, bad input)."""


class InfeasibleLayoutError(InfeasibleError):
    """A parallel layout that cannot run this workload on this cluster; the message says why.

    ``kind`` is a short key sweeps count by (``divides``, ``memory``, ``topology``).
    """

    def __init__(self, message: str, kind: str = "layout") -> None:
        super().__init__(message)
        self.kind = kind
