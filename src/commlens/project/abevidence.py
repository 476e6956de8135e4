"""What the published A/B pairs say of one change: how far the model's gain was from the runs' on the same change.

A published A/B pair is two runs of one table that differ in exactly one setting (``validate.ab_pairs``): the gain
the change brought, published and projected. ``abpairs.yaml`` keeps the pairs of the published tables;
``benchmarks/project_validation.py --write-bands`` rewrites it with ``bands.yaml``. The what-if
(:mod:`commlens.project.whatif`) looks up each single-field change here: a change with pairs prints how many, and by
how many points of gain the model was above (+) or below the runs on them, so a gain the model has over-promised
before reads as such.

A pair counts for a change when it changes the same field between the same two values, in either direction: a
pair measured the other way is turned around (a gain g becomes 1 / (1 + g) - 1, for the published and the projected
gain alike). An unset field stands for its default.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from commlens.project.bands import shipped_rows

__all__ = ["ABPAIRS_FORMAT", "Evidence", "PairEntry", "dump", "evidence", "shipped"]

ABPAIRS_FORMAT = "commlens.abpairs/1"


@dataclass(frozen=True)
class PairEntry:
    """One published pair: ``field`` (``layout.NAME`` or ``set.NAME``) from ``before`` to ``after``."""

    field: str
    before: object
    after: object
    published_gain: float
    modelled_gain: float
    row: str  # table, workload, topology and GPUs, for the reader


@dataclass(frozen=True)
class Evidence:
    """The pairs of one change, turned to its direction: their count, mean gains and the model's mean excess."""

    pairs: int
    published_gain: float  # mean over the pairs
    modelled_gain: float
    excess: float  # mean of projected - published gain (+: the model promised more than the runs gave)
    rows: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "pairs": self.pairs,
            "published_gain": self.published_gain,
            "modelled_gain": self.modelled_gain,
            "excess": self.excess,
            "rows": list(self.rows),
        }


def dump(pairs: Iterable[Any]) -> str:
    """``abpairs.yaml`` holding the ``setting`` pairs of ``validate.ab_pairs`` (what :func:`shipped` reads)."""
    import yaml

    rows = [
        {
            "field": p.field,
            "before": p.before,
            "after": p.after,
            "published_gain": round(float(p.published_gain), 6),
            "modelled_gain": round(float(p.modelled_gain), 6),
            "row": f"{p.table} {p.workload} {p.topology} {p.gpus}",
        }
        for p in pairs
        if p.kind == "setting"
    ]
    head = (
        "# The published A/B pairs that change one setting (commlens project validate --pairs): written by\n"
        "# benchmarks/project_validation.py --write-bands; read by the what-if (commlens.project.abevidence).\n"
    )
    body = yaml.safe_dump({"format": ABPAIRS_FORMAT, "pairs": rows}, sort_keys=False, width=120)
    return head + body


@cache
def shipped() -> tuple[PairEntry, ...]:
    """The pairs of the shipped ``abpairs.yaml`` (none when it is absent or not of this format)."""
    out = []
    for row in shipped_rows("abpairs.yaml", ABPAIRS_FORMAT, "pairs"):
        out.append(
            PairEntry(
                str(row["field"]),
                row.get("before"),
                row.get("after"),
                float(row["published_gain"]),
                float(row["modelled_gain"]),
                str(row.get("row", "")),
            )
        )
    return tuple(out)


def _default(field: str) -> object:
    """The value an unset ``layout.NAME`` stands for (None for other fields)."""
    from commlens.project.layout import ParallelLayout

    head, _, name = field.partition(".")
    info = ParallelLayout.model_fields.get(name) if head == "layout" else None
    return None if info is None or info.is_required() else info.default


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def _turned(gain: float) -> float:
    return 1.0 / (1.0 + gain) - 1.0


def evidence(field: str, before: object, after: object, entries: Iterable[PairEntry] | None = None) -> Evidence | None:
    """The published pairs that change ``field`` (a what-if path: ``layout.NAME``, or ``workload.NAME`` for a pair's
    ``set.NAME``) between ``before`` and ``after``, in that direction; None without any."""
    key = "set." + field.removeprefix("workload.") if field.startswith("workload.") else field
    default = _default(key)
    b = default if before is None else before
    a = default if after is None else after
    found: list[tuple[float, float, str]] = []
    for e in shipped() if entries is None else entries:
        if e.field != key:
            continue
        eb = default if e.before is None else e.before
        ea = default if e.after is None else e.after
        if _same(eb, b) and _same(ea, a):
            found.append((e.published_gain, e.modelled_gain, e.row))
        elif _same(eb, a) and _same(ea, b):
            found.append((_turned(e.published_gain), _turned(e.modelled_gain), e.row))
    if not found:
        return None
    n = len(found)
    published = sum(p for p, _, _ in found) / n
    modelled = sum(m for _, m, _ in found) / n
    return Evidence(n, published, modelled, modelled - published, tuple(r for _, _, r in found))
