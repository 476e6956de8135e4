"""How far a topology reaches, in nodes: one definition for the checked spec and the plain dataclasses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Extent"]


class _Domain(Protocol):
    @property
    def domain_size(self) -> int: ...


class _Tier(Protocol):
    @property
    def nodes(self) -> int: ...


class _Fabric(Protocol):
    @property
    def tiers(self) -> Sequence[_Tier]: ...


class _Levels(Protocol):
    """What the extent is read from: a :class:`~commlens.topology.Topology` or a ``PlainTopology``."""

    @property
    def accelerators_per_node(self) -> int: ...
    @property
    def scale_up(self) -> _Domain: ...
    @property
    def scale_out(self) -> _Fabric | None: ...


class Extent:
    """``domain_nodes`` and ``max_nodes``, mixed into both topology classes."""

    @property
    def domain_nodes(self: _Levels) -> int:
        """Nodes in one scale-up domain (1 for a DGX, 18 for an NVL72 rack)."""
        return self.scale_up.domain_size // self.accelerators_per_node

    @property
    def max_nodes(self: _Levels) -> int:
        """The most nodes this fabric connects (its top tier's group), or one domain without a fabric."""
        if self.scale_out is None:
            return self.scale_up.domain_size // self.accelerators_per_node
        return self.scale_out.tiers[-1].nodes
