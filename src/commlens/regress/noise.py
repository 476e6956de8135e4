"""Learning each series' noise floor: how much whole runs of the same code differ on one system.

A nightly that runs the same revision several times, or a dedicated A/A tag,
holds the answer: the scatter of those runs' typical times. compare uses it so a
side is never taken as more precise than the machine allows, and so a change
between single-round runs can still be judged when it is far beyond it; detect
uses it so a level shift smaller than that scatter is no change point.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

import numpy as np

from commlens.regress.compare import Statistic, row_side
from commlens.results.records import FloorKey, Measurement, MeasurementKey, Run
from commlens.store.noise import NoiseFloor

__all__ = ["GroupBy", "NoiseFloor", "learn_floors"]

GroupBy = Literal["revision", "tag", "all"]


def learn_floors(
    runs: Sequence[Run], *, by: GroupBy = "revision", min_df: int = 2, statistic: Statistic = "median"
) -> list[NoiseFloor]:
    """The noise floor of every series with enough A/A-like history in ``runs``.

    1. Runs that are alike are grouped: the same revision (``by="revision"``; runs without one are left
       out), the same tag, or all runs (``by="all"``, for a history known to be of one code).
    2. Each complete run gives, per series (system fingerprint, op, algo, dtype, redop, root, size,
       placement), its ln typical time: the mean over its rounds of ln(round median).
    3. Per series, the floor is the pooled sd of those values around their group's mean,
       ``sqrt(sum (x - mean_g)^2 / sum (n_g - 1))`` over groups of two runs or more, kept when it has at
       least ``min_df`` degrees of freedom. A change of code between groups does not count as noise.
    """
    if min_df < 1:
        raise ValueError(f"min_df must be >= 1, got {min_df}")
    values: dict[FloorKey, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.status != "complete":
            continue
        group = {"revision": run.revision, "tag": run.tag, "all": ""}[by]
        if group is None:
            continue
        fp = run.system.fingerprint()
        per_key: dict[MeasurementKey, list[Measurement]] = defaultdict(list)
        for m in run.measurements:
            if m.op != "barrier":
                per_key[m.key].append(m)
        for key, ms in per_key.items():
            rounds = row_side([ms], statistic).rounds_s[0]
            level = float(np.mean(np.log(np.maximum(np.asarray(rounds), 1e-300))))
            values[FloorKey(fp, key)][group].append(level)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    floors = []
    for series, groups in values.items():
        full = [np.asarray(v) for v in groups.values() if len(v) >= 2]
        df = sum(v.size - 1 for v in full)
        if df < min_df:
            continue
        ss = sum(float(((v - v.mean()) ** 2).sum()) for v in full)
        floors.append(
            NoiseFloor(
                fingerprint=series.fingerprint,
                key=series.key,
                sd_log=math.sqrt(ss / df),
                runs=sum(v.size for v in full),
                groups=len(full),
                learned_at=now,
            )
        )
    floors.sort(key=lambda f: (f.fingerprint, f.key.order()))
    return floors
