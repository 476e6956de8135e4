"""Shared fixtures: the real third-party files of ``../shared/realdata/``."""

from __future__ import annotations

from pathlib import Path

import pytest

# The checkout's sibling ``shared/`` (CI always has it; a user's own clone may not).
REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"


@pytest.fixture
def realdata() -> Path:
    """``../shared/realdata/``; the test skips, saying why, where that folder is absent."""
    if not REALDATA.is_dir():
        pytest.skip(f"real third-party files not here: {REALDATA} is absent (it sits beside the checkout in CI)")
    return REALDATA
