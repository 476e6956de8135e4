"""Which format a file is in, from its content (never from its name)."""

from __future__ import annotations

import re
from pathlib import Path

from commlens.ingest.base import Source, read_source

__all__ = ["detect_format", "detect_source_format"]

_COMMLENS_RE = re.compile(r'"format"\s*:\s*"commlens\.run/')
_NCCL_TESTS_JSON_RE = re.compile(r'"(?:results|nccl_version)"\s*:')
_PARAM_RE = re.compile(r"COMMS-RES")
_NCCL_TESTS_TEXT_RE = re.compile(
    r"#\s*nThread \d|#\s+Rank\s+\d+|#\s*Avg bus bandwidth|^\W*#?\s*size\s+count\s+type\b|out-of-place", re.M
)


def detect_source_format(source: Source) -> str:
    """``nccl-tests``, ``nccl-tests-json``, ``param`` or ``commlens``; IngestError if none fits."""
    head = source.text.lstrip()
    if head.startswith("{"):
        if _COMMLENS_RE.search(source.text):
            return "commlens"
        if _NCCL_TESTS_JSON_RE.search(source.text):
            return "nccl-tests-json"
        raise source.error(1, "a JSON document, but neither a commlens run (\"format\": \"commlens.run/N\") "
                              "nor nccl-tests -J output (\"results\")")
    if _PARAM_RE.search(source.text):
        return "param"
    if _NCCL_TESTS_TEXT_RE.search(source.text):
        return "nccl-tests"
    raise source.error(1, ("not a format commlens reads: no nccl-tests table, no PARAM COMMS-RES rows, no JSON "
                           "(pass --format if it is one of nccl-tests, nccl-tests-json, param, commlens)"))


def detect_format(path: str | Path) -> str:
    """The format of the file at ``path``: ``nccl-tests``, ``nccl-tests-json``, ``param`` or ``commlens``."""
    return detect_source_format(read_source(path))
