"""Predicted against measured, row by row, with the error stated (MAPE and the worst row)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from commlens.model.fit import Residual, predict_observations
from commlens.model.observe import observations
from commlens.results.records import Run
from commlens.topology import Topology

__all__ = ["CheckResult", "check_runs", "error_summary"]


@dataclass(frozen=True)
class CheckResult:
    """Every row's residual and the error summaries: overall and per op."""

    topology: str
    stat: str
    residuals: tuple[Residual, ...]

    @property
    def summary(self) -> dict[str, float | int]:
        return error_summary(self.residuals)

    def by_op(self) -> dict[str, dict[str, float | int]]:
        ops: dict[str, list[Residual]] = {}
        for r in self.residuals:
            ops.setdefault(r.obs.op, []).append(r)
        return {op: error_summary(rows) for op, rows in ops.items()}

    def by_algo(self) -> dict[str, dict[str, float | int]]:
        """The error per op and algorithm as recorded (``all_reduce/ring``, ``all_reduce/builtin``)."""
        groups: dict[str, list[Residual]] = {}
        for r in self.residuals:
            groups.setdefault(f"{r.obs.op}/{r.obs.algo}", []).append(r)
        return {key: error_summary(rows) for key, rows in groups.items()}

    def as_dict(self) -> dict[str, object]:
        """The summaries and every row (``model check --json``)."""
        return {
            "topology": self.topology,
            "stat": self.stat,
            "summary": self.summary,
            "by_op": self.by_op(),
            "by_algo": self.by_algo(),
            "rows": [r.as_dict() for r in self.residuals],
        }


def error_summary(residuals: Iterable[Residual]) -> dict[str, float | int]:
    """rows, MAPE %, max |error| %, median |error| % and mean signed error % (bias)."""
    errors = sorted(r.error for r in residuals)
    if not errors:
        return {"rows": 0, "mape_pct": 0.0, "max_ape_pct": 0.0, "median_ape_pct": 0.0, "bias_pct": 0.0}
    absolute = sorted(abs(e) for e in errors)
    mid = len(absolute) // 2
    median = absolute[mid] if len(absolute) % 2 else (absolute[mid - 1] + absolute[mid]) / 2
    return {
        "rows": len(errors),
        "mape_pct": 100.0 * sum(absolute) / len(absolute),
        "max_ape_pct": 100.0 * absolute[-1],
        "median_ape_pct": 100.0 * median,
        "bias_pct": 100.0 * sum(errors) / len(errors),
    }


def check_runs(
    runs: Iterable[Run],
    topology: Topology,
    *,
    stat: str = "mean",
    min_size_bytes: int = 1,
    algos: Collection[str] | None = None,
) -> CheckResult:
    """Predict every row of ``runs`` on ``topology`` as it ran; :class:`InfeasibleError` for a shape it cannot hold.

    ``algos``: only the rows that ran these algorithms (see :func:`~commlens.model.observe.observations`).
    """
    obs = observations(runs, stat=stat, min_size_bytes=min_size_bytes, algos=algos)
    predicted = predict_observations(topology, obs)
    return CheckResult(topology.name, stat, tuple(Residual(o, t) for o, t in zip(obs, predicted)))
