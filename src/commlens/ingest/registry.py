"""The input formats commlens reads, one entry each, and telling a file's format from its content.

Each format is one module that declares its :class:`~commlens.ingest.base.InputFormat` as ``FORMAT``
(name, description, sniffer, parser); adding one is that module and one line in ``_ENTRIES``.
Help texts and error messages list the formats from here.
"""

from __future__ import annotations

from pathlib import Path

from commlens.ingest import commlens_json, nccl_inspector, nccltests_json, nccltests_text, param
from commlens.ingest.base import IngestOptionError, InputFormat, Source, read_source

__all__ = ["FORMATS", "detect_format", "detect_source_format", "get_format"]

# In the order help texts and error messages list them.
_ENTRIES: tuple[InputFormat, ...] = (
    nccltests_text.FORMAT,
    nccltests_json.FORMAT,
    param.FORMAT,
    nccl_inspector.FORMAT,
    commlens_json.FORMAT,
)

FORMATS: dict[str, InputFormat] = {fmt.name: fmt for fmt in _ENTRIES}
if len(FORMATS) != len(_ENTRIES):
    raise ImportError(f"two input formats share a name: {[fmt.name for fmt in _ENTRIES]}")

# Sniffing order: formats with a marker of their own first, then the looser ones; else as listed.
_SNIFF_ORDER: tuple[InputFormat, ...] = tuple(sorted(_ENTRIES, key=lambda fmt: not fmt.sniff_first))


def get_format(name: str) -> InputFormat:
    """The format called ``name``; IngestOptionError (a ValueError) naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise IngestOptionError(f"unknown format {name!r}; known: auto, {', '.join(FORMATS)}") from None


def detect_source_format(source: Source) -> str:
    """The name of the format of text already read; IngestError naming what was looked for if none fits."""
    document = "json" if source.text.lstrip().startswith("{") else "text"
    for fmt in _SNIFF_ORDER:
        if fmt.document == document and fmt.sniff(source):
            return fmt.name
    if document == "json":
        markers = [fmt.marker for fmt in _ENTRIES if fmt.document == "json"]
        raise source.error(1, f"a JSON document, but {_neither(markers)}")
    missing = [f"no {fmt.marker}" for fmt in _ENTRIES if fmt.document == "text"]
    if any(fmt.document == "json" for fmt in _ENTRIES):
        missing.append("no JSON")
    raise source.error(
        1, (f"not a format commlens reads: {', '.join(missing)} (pass --format if it is one of {', '.join(FORMATS)})")
    )


def detect_format(path: str | Path) -> str:
    """The name of the format of the file at ``path`` (one of :data:`FORMATS`), from its content."""
    return detect_source_format(read_source(path))


def _neither(markers: list[str]) -> str:
    """``neither A nor B`` (``neither A, B nor C``; ``not A`` for one)."""
    if len(markers) == 1:
        return f"not {markers[0]}"
    return f"neither {', '.join(markers[:-1])} nor {markers[-1]}"
