"""What the stored baselines and thresholds (``store.baselines``, ``store.thresholds``) mean for compare and detect.

- :func:`baseline_runs`: the runs of the stored baseline of the candidate's series (``compare baseline X``).
- :func:`compare_thresholds` / :func:`detect_thresholds`: the per-row and per-series settings that
  ``compare_runs`` and ``detect_history`` take, from the stored thresholds. A setting the user gave
  explicitly (a command-line option) is never overridden: name it in ``explicit``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence

from commlens.regress.compare import CompareSettings, RowThreshold
from commlens.regress.detect import DetectSettings
from commlens.regress.history import Series, SeriesSettings
from commlens.results.records import MeasurementKey, Run
from commlens.store import Baseline, BaselineError, Store, Threshold, resolve_threshold, series_text
from commlens.store.refs import BASELINE_REFS, is_baseline_ref

__all__ = [
    "BASELINE_REFS",
    "baseline_runs",
    "candidate_series",
    "compare_thresholds",
    "detect_thresholds",
    "is_baseline_ref",
]


def candidate_series(runs: Sequence[Run]) -> tuple[str, str | None]:
    """The one series (fingerprint, tag) ``runs`` belong to; BaselineError saying so when they span several."""
    fingerprints = sorted({r.system.fingerprint() for r in runs})
    tags = sorted({r.tag for r in runs}, key=lambda t: (t is not None, t or ""))
    if len(fingerprints) != 1:
        raise BaselineError(f"the candidate's runs ran on {len(fingerprints)} systems ({', '.join(fingerprints)})")
    if len(tags) != 1:
        shown = ", ".join("untagged" if t is None else repr(t) for t in tags)
        raise BaselineError(f"the candidate's runs have {len(tags)} tags ({shown})")
    return fingerprints[0], tags[0]


def _set_command(fingerprint: str, tag: str | None) -> str:
    series = "--untagged" if tag is None else f"--tag {tag}"
    return f"`commlens baseline set RUN_OR_tag:NAME --fingerprint {fingerprint} {series}`"


def baseline_runs(store: Store, candidate: Sequence[Run]) -> tuple[Baseline, list[Run]]:
    """The stored baseline of the candidate's series and its runs, the candidate's own runs left out.

    BaselineError when the candidate spans several series, its series has no baseline (the message says
    how to set one), the baseline's runs are gone, or the candidate is all of its baseline."""
    try:
        fingerprint, tag = candidate_series(candidate)
    except BaselineError as e:
        raise BaselineError(f"{e}: a baseline belongs to one series; name the base run or tag instead") from None
    baseline = store.baselines.get(fingerprint, tag)
    if baseline is None:
        raise BaselineError(
            f"no baseline is set for the candidate's series ({series_text(fingerprint, tag)}): "
            f"set one with {_set_command(fingerprint, tag)}"
        )
    own = {r.run_id for r in candidate}
    ids = [run_id for run_id in store.baselines.run_ids(baseline) if run_id not in own]
    if not ids:
        raise BaselineError(
            f"the candidate is the baseline of its series ({series_text(fingerprint, tag)}: "
            f"{baseline.ref_text}) itself: nothing is left to compare it with"
        )
    return baseline, store.get_runs(ids)


def _without(thresholds: Sequence[Threshold], names: Collection[str]) -> list[Threshold]:
    """``thresholds`` with the settings ``names`` cleared: an explicit option (or the other command) decides
    those, so they neither apply nor name a threshold as the source."""
    if not names:
        return list(thresholds)
    return [
        dataclasses.replace(
            t,
            min_change=None if "min_change" in names else t.min_change,
            alpha=None if "alpha" in names else t.alpha,
            detect_alpha=None if "detect_alpha" in names else t.detect_alpha,
        )
        for t in thresholds
    ]


def compare_thresholds(
    thresholds: Sequence[Threshold],
    fingerprint: str,
    tag: str | None,
    settings: CompareSettings,
    *,
    explicit: Collection[str] = (),
) -> Callable[[MeasurementKey], RowThreshold | None]:
    """Per row of the series (``fingerprint``, ``tag``): the stored min change and alpha that apply (the rest
    from ``settings``), or None when no stored threshold sets either. ``explicit``: settings given by the
    user (``min_change``, ``alpha``), which stored thresholds do not override."""
    usable = _without(thresholds, ["detect_alpha", *(n for n in ("min_change", "alpha") if n in explicit)])

    def for_row(key: MeasurementKey) -> RowThreshold | None:
        r = resolve_threshold(usable, Series(key, fingerprint, tag))
        if r.min_change is None and r.alpha is None:
            return None
        return RowThreshold(
            min_change=settings.min_change if r.min_change is None else r.min_change,
            alpha=settings.alpha if r.alpha is None else r.alpha,
            source=r.source_text(),
        )

    return for_row


def detect_thresholds(
    thresholds: Sequence[Threshold], settings: DetectSettings, *, explicit: Collection[str] = ()
) -> Callable[[Series], SeriesSettings | None]:
    """Per series: the stored min change and detect alpha that apply (the rest from ``settings``), or None when
    no stored threshold sets either. ``explicit``: ``min_change`` and ``alpha`` when the user gave them."""
    names = [n for n in ("min_change", "alpha") if n in explicit]
    usable = _without(thresholds, ["alpha", *("detect_alpha" if n == "alpha" else n for n in names)])

    def for_series(series: Series) -> SeriesSettings | None:
        r = resolve_threshold(usable, series)
        if r.min_change is None and r.detect_alpha is None:
            return None
        own = dataclasses.replace(
            settings,
            min_change=settings.min_change if r.min_change is None else r.min_change,
            alpha=settings.alpha if r.detect_alpha is None else r.detect_alpha,
        )
        return SeriesSettings(own, r.source_text())

    return for_series
