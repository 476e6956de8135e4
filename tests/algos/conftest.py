"""Fixtures for the algorithm tests: the session's worker pools (see harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import Pools


@pytest.fixture(scope="session")
def pools() -> Iterator[Pools]:
    """One persistent gloo pool per world size, started on first use, closed at session end."""
    pools = Pools()
    try:
        yield pools
    finally:
        pools.close()
