"""One repository object per kind of stored object besides runs, reached from the store itself:
``store.baselines``, ``store.thresholds``, ``store.floors``, ``store.reports``, ``store.change_points``.

Runs are :class:`~commlens.store.repo.Store` methods; these are the other tables, each behind the functions
of its own module (``series_meta``, ``noise``, ``reports``, ``change_points``), which stay the reference.
A caller holding a store needs no other import to reach any of them.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commlens.results.jsonvalue import JsonObject
    from commlens.results.records import FloorKey, Series
    from commlens.store.change_points import ChangeToSave, Direction, SavedChange
    from commlens.store.noise import NoiseFloor
    from commlens.store.repo import Store
    from commlens.store.reports import Report, ReportSummary
    from commlens.store.series_meta import Baseline, RefKind, ResolvedThreshold, Threshold

__all__ = ["Baselines", "ChangePoints", "Floors", "Reports", "Thresholds"]


@dataclass(frozen=True)
class Baselines:
    """The run or tag each series (system fingerprint, tag) is compared against."""

    store: Store

    def set(self, fingerprint: str, tag: str | None, ref_kind: RefKind, ref: str, note: str = "") -> Baseline:
        from commlens.store.series_meta import set_baseline

        return set_baseline(self.store, fingerprint, tag, ref_kind, ref, note)

    def get(self, fingerprint: str, tag: str | None) -> Baseline | None:
        from commlens.store.series_meta import get_baseline

        return get_baseline(self.store, fingerprint, tag)

    def list(self) -> builtins.list[Baseline]:
        from commlens.store.series_meta import list_baselines

        return list_baselines(self.store)

    def unset(self, fingerprint: str, tag: str | None) -> bool:
        from commlens.store.series_meta import unset_baseline

        return unset_baseline(self.store, fingerprint, tag)

    def run_ids(self, baseline: Baseline) -> builtins.list[str]:
        from commlens.store.series_meta import baseline_run_ids

        return baseline_run_ids(self.store, baseline)

    def fingerprint(self, text: str) -> str:
        """The full system fingerprint ``text`` names (a stored run's, exactly or as a unique prefix; else
        ``text`` itself when it has a fingerprint's shape); BaselineError otherwise."""
        from commlens.store.series_meta import resolve_fingerprint

        return resolve_fingerprint(self.store, text)

    def tag_fingerprints(self, tag: str) -> builtins.list[str]:
        """The fingerprints of the systems the runs of ``tag`` ran on, sorted."""
        from commlens.store.series_meta import tag_fingerprints

        return tag_fingerprints(self.store, tag)


@dataclass(frozen=True)
class Thresholds:
    """The min change and alpha compare and detect use for the series and rows a selector matches."""

    store: Store

    def set(self, threshold: Threshold) -> Threshold:
        from commlens.store.series_meta import set_threshold

        return set_threshold(self.store, threshold)

    def list(self) -> builtins.list[Threshold]:
        from commlens.store.series_meta import list_thresholds

        return list_thresholds(self.store)

    def unset(self, selector: Threshold) -> bool:
        from commlens.store.series_meta import unset_threshold

        return unset_threshold(self.store, selector)

    def resolve(self, series: Series) -> ResolvedThreshold:
        """What the stored thresholds set for ``series``."""
        from commlens.store.series_meta import resolve_threshold

        return resolve_threshold(self.list(), series)


@dataclass(frozen=True)
class Floors:
    """Each series' run-to-run noise floor, learned from stored history."""

    store: Store

    def save(self, floors: Sequence[NoiseFloor]) -> int:
        from commlens.store.noise import save_floors

        return save_floors(self.store, floors)

    def list(self, fingerprints: Iterable[str] | None = None) -> builtins.list[NoiseFloor]:
        from commlens.store.noise import list_floors

        return list_floors(self.store, fingerprints)

    def load(self, fingerprints: Iterable[str] | None = None) -> dict[FloorKey, float]:
        from commlens.store.noise import load_floors

        return load_floors(self.store, fingerprints)


@dataclass(frozen=True)
class Reports:
    """Diagnoses and projections kept for the dashboard."""

    store: Store

    def save(
        self,
        kind: str,
        title: str | None,
        payload: JsonObject,
        *,
        fingerprint: str | None = None,
        run_id: str | None = None,
    ) -> str:
        """Keep ``payload`` (checked against ``kind``'s shape) as a new report; its id. A title of None: what
        the document found (``default_title``)."""
        from commlens.store.reports import default_title, save_report

        shown = default_title(kind, payload) if title is None else title
        return save_report(self.store, kind, shown, payload, fingerprint=fingerprint, run_id=run_id)

    def list(
        self, kind: str | Sequence[str] | None = None, limit: int = 50, offset: int = 0
    ) -> builtins.list[ReportSummary]:
        from commlens.store.reports import list_reports

        return list_reports(self.store, kind, limit, offset)

    def count(self, kind: str | Sequence[str] | None = None) -> int:
        from commlens.store.reports import count_reports

        return count_reports(self.store, kind)

    def get(self, report_id: str) -> Report:
        """By its id or a unique prefix of at least 4 hex digits."""
        from commlens.store.reports import get_report

        return get_report(self.store, report_id)


@dataclass(frozen=True)
class ChangePoints:
    """The change points ``detect --save`` found, as the dashboard and Grafana read them."""

    store: Store

    def save(self, changes: Iterable[ChangeToSave], examined: Iterable[Series] = ()) -> int:
        from commlens.store.change_points import save_change_points

        return save_change_points(self.store, changes, examined)

    def load(
        self,
        *,
        since: datetime | str | None = None,
        direction: Direction | None = None,
        series: Series | None = None,
        fingerprint: str | None = None,
        limit: int | None = 1000,
    ) -> builtins.list[SavedChange]:
        from commlens.store.change_points import load_change_points

        return load_change_points(
            self.store, since=since, direction=direction, series=series, fingerprint=fingerprint, limit=limit
        )
