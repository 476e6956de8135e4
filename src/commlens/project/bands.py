"""An error band on every projection, from the validation residuals of its nearest family of published runs.

A family is (GPU generation, framework, dense or MoE, sequence-length class). For each family with rows in the
published tables (``commlens project validate``), ``bands.yaml`` keeps the rows' residuals: the log of the published
step time over the projected one (a run slower than projected has a positive residual). A projection's band is
the 80% prediction interval of a new row of its family, taken as normal in the log:

    step x exp(mean +- t(0.9, n - 1) x sd x sqrt(1 + 1/n))

1. the family of the projection is looked up with at least ``MIN_ROWS`` rows;
2. failing that, the sequence class is dropped, then the generation (the same stack on other GPUs), then the
   framework instead, then both (all rows last);
3. the band says which family it rests on and how many rows.

``benchmarks/project_validation.py --write`` refits ``bands.yaml`` from the tables it validates, and reports the
band's coverage of the rows with each row left out of its own band's fit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from commlens.project.frameworks import framework as framework_of
from commlens.project.frameworks import framework_names, generation
from commlens.specdata import load_yaml

__all__ = [
    "BANDS_FORMAT",
    "Band",
    "Residual",
    "band",
    "family_of",
    "fit",
    "prediction_band",
    "seq_class",
    "shipped_rows",
]

BANDS_FORMAT = "commlens.bands/1"
MIN_ROWS = 3
COVERAGE = 0.8
# Two-sided 80% Student t quantiles (0.9) by degrees of freedom; 1.2816 beyond the table.
_T90 = {1: 3.078, 2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397, 9: 1.383, 10: 1.372}
_T90_LARGE = [(15, 1.341), (20, 1.325), (30, 1.310), (60, 1.296)]


def _t90(df: int) -> float:
    if df in _T90:
        return _T90[df]
    for limit, value in _T90_LARGE:
        if df <= limit:
            return value
    return 1.2816


def seq_class(seq_len: int) -> str:
    """``short`` up to 4,096 tokens, ``long`` up to 16,384, ``very-long`` beyond."""
    return "short" if seq_len <= 4096 else "long" if seq_len <= 16384 else "very-long"


def family_of(accelerator: str, framework: str, moe: bool, seq_len: int) -> tuple[str, str, str, str]:
    """(generation, framework family, dense|moe, sequence class); NeMo runs Megatron-Core, and a past release
    (``Framework.release_of``) is in its stack's family."""
    release_of = framework_of(framework).release_of if framework in framework_names() else None
    fw = release_of or framework
    fw = "megatron-core" if fw == "nemo" else fw
    return generation(accelerator), fw, "moe" if moe else "dense", seq_class(seq_len)


@dataclass(frozen=True)
class Residual:
    """One validated row: its family and log(published step / projected step)."""

    family: tuple[str, str, str, str]
    log_ratio: float
    row: str = ""


@dataclass(frozen=True)
class Band:
    """The 80% band of a projected step time and what it rests on."""

    low_s: float
    high_s: float
    family: str  # e.g. "hopper x megatron-core x dense x long", "*" where relaxed
    rows: int

    def as_dict(self) -> dict[str, object]:
        return {
            "low_s": self.low_s,
            "high_s": self.high_s,
            "coverage": COVERAGE,
            "family": self.family,
            "rows": self.rows,
        }


def prediction_band(log_ratios: list[float]) -> tuple[float, float] | None:
    """(low, high) multipliers of the projected step: the 80% prediction interval of a new row."""
    n = len(log_ratios)
    if n < 2:
        return None
    mean = sum(log_ratios) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in log_ratios) / (n - 1))
    half = _t90(n - 1) * sd * math.sqrt(1 + 1 / n)
    return math.exp(mean - half), math.exp(mean + half)


_RELAX = ((0, 1, 2, 3), (0, 1, 2), (1, 2), (0, 2), (2,), ())  # which key fields must match, tightest first


def _nearest(residuals: Iterable[Residual], family: tuple[str, str, str, str]) -> tuple[list[float], str] | None:
    rows = list(residuals)
    for keep in _RELAX:
        chosen = [r.log_ratio for r in rows if all(r.family[i] == family[i] for i in keep)]
        if len(chosen) >= MIN_ROWS:
            name = " x ".join(family[i] if i in keep else "*" for i in range(4))
            return chosen, name
    return None


def shipped_rows(name: str, fmt: str, key: str) -> list[Any]:
    """The list under ``key`` of the package's data file ``name`` (``commlens/project/NAME``), empty when the file
    is absent or not of format ``fmt``: the fits the run of record writes (``bands.yaml``, ``abpairs.yaml``)."""
    path = resources.files("commlens.project") / name
    if not path.is_file():
        return []
    data: Any = load_yaml(path.read_text(encoding="utf-8"), shipped=True)
    if not isinstance(data, dict) or data.get("format") != fmt:
        return []
    return list(data.get(key) or [])


@cache
def _shipped() -> tuple[Residual, ...]:
    out = []
    for row in shipped_rows("bands.yaml", BANDS_FORMAT, "residuals"):
        fam = tuple(str(x) for x in row["family"])
        if len(fam) == 4 and isinstance(row.get("log_ratio"), int | float):
            out.append(Residual((fam[0], fam[1], fam[2], fam[3]), float(row["log_ratio"]), str(row.get("row", ""))))
    return tuple(out)


def band(
    step_s: float,
    family: tuple[str, str, str, str],
    residuals: Iterable[Residual] | None = None,
) -> Band | None:
    """The band of a projected ``step_s`` of ``family`` (from the shipped residuals unless given)."""
    found = _shipped_bounds(family) if residuals is None else _bounds(_nearest(residuals, family))
    if found is None:
        return None
    low, high, name, rows = found
    return Band(step_s * low, step_s * high, name, rows)


def _bounds(found: tuple[list[float], str] | None) -> tuple[float, float, str, int] | None:
    if found is None:
        return None
    ratios, name = found
    bounds = prediction_band(ratios)
    return None if bounds is None else (bounds[0], bounds[1], name, len(ratios))


@cache
def _shipped_bounds(family: tuple[str, str, str, str]) -> tuple[float, float, str, int] | None:
    return _bounds(_nearest(_shipped(), family))


def fit(residuals: Iterable[Residual]) -> str:
    """``bands.yaml`` holding ``residuals`` (what :func:`band` reads)."""
    lines = [
        "# Validation residuals by family: log(published step / projected step), one per published row.",
        "# Written by benchmarks/project_validation.py --write; read by commlens.project.bands.",
        f"format: {BANDS_FORMAT}",
        "residuals:",
    ]
    for r in residuals:
        fam = ", ".join(r.family)
        lines.append(f"  - {{family: [{fam}], log_ratio: {r.log_ratio:.6f}, row: {r.row!r}}}")
    return "\n".join(lines) + "\n"
