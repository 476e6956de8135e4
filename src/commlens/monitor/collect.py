"""Online detection over a live job: join the ranks' records, name stragglers, slow groups and slowdowns.

:class:`Collector` is fed records (from the ranks' ``/records`` endpoints,
their JSONL files, or NCCL Inspector's output) and evaluated every few
seconds. It issues nothing to the job: no collective, no barrier.

- **Join.** Records are joined by (group, sequence number): a collective is
  complete when every rank of its group has reported it.
- **Stragglers.** Over the last ``window`` complete collectives of each
  group, :func:`commlens.diagnose.stragglers.detect_stragglers` (the method
  of ``commlens diagnose stragglers``) names late arrivers and ranks slow
  within, late by more than ``late_fraction`` of a step and ``jitter_k``
  times the ranks' arrival jitter, after the job's first ``warmup_steps``
  steps (a window reaching into them carries no verdict). A rank named
  over ``window_steps // fresh_divisor`` steps of the job raises a
  ``straggler`` alert (``slow_within`` too): named by the
  latest window and by the window that ended that many steps earlier
  (judged from the collectives held; ``persist - 1`` such windows, each as
  far back again, when ``persist`` > 2), or, where that window is not held
  (the warm-up), in ``persist`` evaluations in a row spanning those steps.
  Counted in the job's steps, the alert waits for no second evaluation
  (at 0.25 s, ~10 steps of a 25 ms step) once the steps confirm it. It
  clears after ``persist`` clean evaluations spanning as many steps.
- **Slow groups.** Groups of the same size running the same op and size
  bucket (the TP groups of a job, say) are compared by their own time (the
  collective's time after its last rank arrived): one above ``slow_factor``
  times the others' median raises ``slow_group``.
- **Slowdowns.** Each (group, op, size bucket) keeps a history of its own
  time, one point per evaluation that brings at least ``point_samples`` new
  collectives (their median); :func:`commlens.regress.detect.find_changes`
  (the detect engine) on the last ``history`` points finds a level shift; a
  slower level that is still the current one raises ``slowdown``.
- **Expectation.** With a model, a group whose own time is persistently
  below ``below_expected`` of the model's busBW raises ``below_expected``.

Alerts are log lines, :class:`Alert` objects, and metrics on the collector's
own endpoint (``commlens_monitor_alert`` and friends).
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import statistics
import time
from collections import deque
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from commlens.diagnose.stragglers import (
    CollectiveTable,
    StragglerError,
    StragglerParams,
    detect_stragglers,
    is_synchronizing,
)
from commlens.errors import CommlensError
from commlens.monitor.expect import Expectations
from commlens.regress.detect import DetectSettings, find_changes
from commlens.results.collectives import CollectiveRecord, CollectiveRecordError, record_from_wire, size_bucket
from commlens.results.jsonvalue import JsonObject
from commlens.results.units import format_size

__all__ = [
    "ALERT_KINDS",
    "Alert",
    "CollectError",
    "CollectSettings",
    "Collector",
    "EndpointSource",
    "JsonlSource",
    "SourceProblem",
    "collect",
    "parse_endpoints",
    "replay",
    "warm_up",
]

log = logging.getLogger("commlens.monitor")

ALERT_KINDS = ("straggler", "slow_group", "slowdown", "below_expected", "hang")
MAX_LINE_BYTES = 1 << 20
MAX_POLL_BYTES = 64 << 20  # of one JSONL file in one poll: a huge file is caught up over several
MAX_COUNT = 1 << 63  # cursors, counts and ranks from outside: an integer below this
MAX_POLL_THREADS = 32  # endpoints polled at once
MIN_POLL_S = 0.05  # a poll with less time than this left before the collector's end is not made
MAX_PENDING = 200_000  # collectives waiting for their last rank's record
MAX_WINDOW = 1024  # collectives the straggler method looks at, at most


class CollectError(CommlensError, ValueError):
    """A collector that cannot read its sources (a bad endpoint, an unreadable directory)."""


@dataclass(frozen=True)
class CollectSettings:
    window_steps: int = 10  # training steps of collectives the straggler method looks at (jobs that mark steps)
    window: int = 24  # complete collectives it looks at when the job marks no steps
    # evaluations in a row before an alert is raised (and clean ones before it clears). For a straggler, also
    # the windows judged: the latest and max(1, persist - 1) that ended window / fresh_divisor steps apart
    # before it, from the collectives held; all naming the rank raise the alert at once, whatever the cadence
    persist: int = 2
    # a straggler is named over window / this many steps (collectives, in jobs that mark no steps) before its
    # alert: two windows that far apart, or evaluations in a row that span it; as many clean ones clear it
    fresh_divisor: int = 2
    late_threshold_s: float = 5e-3  # median lateness above the ranks' typical lateness by more than this
    late_fraction: float = 0.25  # ... and by more than this fraction of a training step (or of the interval
    # between collectives when the job marks no steps): what the scheduler's noise cannot do persistently
    last_fraction: float = 0.5  # a late arriver must be the last to arrive in at least this share
    # ... and be late by more than this many times the ranks' arrival jitter (0: off). Four ranks on two
    # cores arrive with a jitter of 6-9 ms at a 65 ms step, and a rank's median lateness over a window reached
    # 1.7 times it in healthy jobs. benchmarks/monitor_accuracy.py's 35 kept slowed trials (seeds 16, 17, 16),
    # replayed: 28 found within 20 steps at 0, 1.5 and 1.75; 26 at 2, 22 at 2.5, 16 at 3. 1.5 keeps a margin
    jitter_k: float = 1.5
    # the job's first training steps (collectives, in jobs that mark no steps: ``window``) carry no straggler
    # verdict: lazy initialisation, the allocator's growth and the first polls of the ranks' endpoints (each
    # answering with the backlog of records) delay ranks unevenly there; one healthy CI run had a rank 17 ms
    # late over steps 4-13 of a 65 ms step. Steps of the job, not of the collector's own start
    warmup_steps: int = 10
    slow_factor: float = 1.5
    end_spread_s: float = 0.1
    history: int = 60  # own-time points per series kept for the slowdown detector
    # collectives a point summarises at least (their median): an evaluation with fewer adds them to the next.
    # Polled live, records arrive in bursts, and a point of one or two collectives is as noisy as they are: on a
    # busy 2-core machine such points made a healthy job's own time "rise" 53% for a second, which the same
    # records replayed (about 3 collectives a point) did not show
    point_samples: int = 3
    min_change: float = 0.3  # a slowdown must slow the own time by at least this fraction
    alpha: float = 1e-3
    below_expected: float = 0.0  # 0: no below-expectation alerts (the ranks' metrics carry the ratio)
    hang_after_s: float = 60.0  # a collective in flight this long on some ranks of its group is a hang

    def __post_init__(self) -> None:
        if self.window < 4:
            raise CollectError(f"window must be >= 4 collectives, got {self.window}")
        if self.window_steps < 2:
            raise CollectError(f"window_steps must be >= 2 steps, got {self.window_steps}")
        if self.persist < 1:
            raise CollectError(f"persist must be >= 1, got {self.persist}")
        if self.warmup_steps < 0:
            raise CollectError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.point_samples < 1:
            raise CollectError(f"point_samples must be >= 1, got {self.point_samples}")
        if not (math.isfinite(self.jitter_k) and self.jitter_k >= 0):
            raise CollectError(f"jitter_k must be a finite number >= 0, got {self.jitter_k}")
        for name in ("late_threshold_s", "end_spread_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise CollectError(f"{name} must be a finite number > 0, got {value}")
        if not (math.isfinite(self.slow_factor) and self.slow_factor > 1):
            raise CollectError(f"slow_factor must be > 1, got {self.slow_factor}")
        if not 0 <= self.min_change < 1:
            raise CollectError(f"min_change must be in [0, 1), got {self.min_change}")
        if not (math.isfinite(self.hang_after_s) and self.hang_after_s > 0):
            raise CollectError(f"hang_after_s must be a finite number > 0, got {self.hang_after_s}")
        if not 0 <= self.below_expected < 1:
            raise CollectError(f"below_expected must be in [0, 1), got {self.below_expected}")


@dataclass(frozen=True)
class Alert:
    """One alert: what was found on which group, op and rank, when it was raised and (once) cleared."""

    kind: str
    group: str
    op: str
    rank: int | None
    text: str
    raised_at_s: float
    step: int | None = None  # the training step the job was at (records' steps), when known
    cleared_at_s: float | None = None
    detail: JsonObject = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        return (self.kind, self.group, self.op, self.rank)

    def as_dict(self) -> JsonObject:
        return {
            "kind": self.kind,
            "group": self.group,
            "op": self.op,
            "rank": self.rank,
            "text": self.text,
            "raised_at_s": self.raised_at_s,
            "step": self.step,
            "cleared_at_s": self.cleared_at_s,
            **({"detail": self.detail} if self.detail else {}),
        }


@dataclass
class _Joined:
    seq: int
    op: str
    bucket: int
    size_bytes: int
    starts: list[float]
    ends: list[float]
    hosts: list[str | None]
    step: int | None

    @property
    def own_s(self) -> float:
        """The collective's time once its last rank arrived (the part no straggler causes)."""
        return max(0.0, min(self.ends) - max(self.starts))


def _arrival_jitter(joined: list[_Joined]) -> float:
    """The ranks' typical arrival jitter (s): the median over ranks of the spread of each rank's lateness.

    A rank's lateness at a collective is its arrival behind the collective's median arrival; its spread is
    the median absolute deviation from its own median, scaled to a standard deviation. A straggler is late
    steadily and a rank the scheduler delays now and then is not, so the typical rank's spread measures the
    noise a steady lateness must stand out of. Starts are taken as recorded: an offset between hosts' clocks
    that reorders their arrivals changes which ranks set each collective's median, and so the estimate.
    """
    if not joined:
        return 0.0
    starts = np.array([j.starts for j in joined], dtype=np.float64)  # (collectives, ranks)
    late = starts - np.median(starts, axis=1, keepdims=True)
    spreads = np.median(np.abs(late - np.median(late, axis=0)), axis=0)
    return 1.4826 * float(np.median(spreads))


def _list(ranks: list[int]) -> str:
    return ",".join(map(str, ranks[:16])) + ("..." if len(ranks) > 16 else "")


def _interval(joined: list[_Joined]) -> float:
    """The median time of a training step (from the records' steps), else between collectives."""
    first: dict[int, float] = {}
    for j in joined:
        if j.step is not None:
            first[j.step] = min(first.get(j.step, math.inf), min(j.starts))
    steps = sorted(first)
    gaps = [(first[b] - first[a]) / (b - a) for a, b in zip(steps, steps[1:])]
    if not gaps:
        ends = sorted(min(j.ends) for j in joined)
        gaps = [b - a for a, b in zip(ends, ends[1:])]
    return statistics.median(gaps) if gaps else 0.0


class _Group:
    def __init__(self, name: str, ranks: tuple[int, ...], window: int, history: int) -> None:
        self.name = name
        self.ranks = ranks
        self.index = {r: j for j, r in enumerate(ranks)}
        self.pending: dict[int, dict[int, CollectiveRecord]] = {}
        self.joined: deque[_Joined] = deque(maxlen=max(window, MAX_WINDOW))
        self.history: dict[tuple[str, int], deque[float]] = {}
        self.fresh: dict[tuple[str, int], list[float]] = {}
        self.history_len = history
        self.count = 0
        self.last_step: int | None = None


class Collector:
    """Joins records and evaluates them; see the module docstring."""

    def __init__(self, settings: CollectSettings | None = None, expectations: Expectations | None = None) -> None:
        self.settings = settings or CollectSettings()
        self.expectations = expectations
        self.groups: dict[str, _Group] = {}
        self.active: dict[tuple[str, str, str, int | None], Alert] = {}
        self.history: list[Alert] = []  # every alert raised, in order (bounded)
        self._streak: dict[tuple[str, str, str, int | None], int] = {}
        self._clean: dict[tuple[str, str, str, int | None], int] = {}
        self._clean_since: dict[tuple[str, str, str, int | None], int] = {}
        self._since: dict[tuple[str, str, str, int | None], int] = {}
        self.lateness: dict[tuple[str, int], float] = {}
        self.records = 0
        self.rejected = 0
        self.dropped = 0
        self.evaluations = 0
        self.hosts: dict[int, str] = {}
        self.inflight: dict[int, InFlight | None] = {}  # rank -> its oldest collective in flight
        self.hang_reports: list[HangReport] = []  # the ranks' own hang lines (JSONL)
        self.metrics: Any = None
        self.sources: list[Any] = []  # what collect() reads, for the summary's states

    # ---- joining ------------------------------------------------------------------------------------

    def add(self, records: Iterable[CollectiveRecord]) -> int:
        """Add records; returns how many collectives they completed."""
        completed = 0
        for rec in records:
            self.records += 1
            if rec.host is not None:
                self.hosts[rec.rank] = rec.host
            ranks = rec.group_ranks
            group = self.groups.get(rec.group)
            if group is None:
                if ranks is None:
                    ranks = tuple(range(rec.group_size))  # NCCL Inspector: communicator ranks 0..n-1
                group = self.groups[rec.group] = _Group(rec.group, ranks, self.settings.window, self.settings.history)
            if rec.rank not in group.index and rec.group_ranks is None:
                self.rejected += 1
                continue
            slot = group.pending.setdefault(rec.seq, {})
            slot[rec.rank] = rec
            if len(slot) == len(group.ranks):
                del group.pending[rec.seq]
                self._join(group, rec.seq, slot)
                completed += 1
                if self.metrics is not None:
                    self.metrics.add_joined(group.name, 1)
            elif len(group.pending) > MAX_PENDING:
                oldest = min(group.pending)
                del group.pending[oldest]
                self.dropped += 1
        return completed

    def _join(self, group: _Group, seq: int, slot: dict[int, CollectiveRecord]) -> None:
        recs = [slot[r] for r in group.ranks]
        first = recs[0]
        steps = [r.step for r in recs if r.step is not None]
        joined = _Joined(
            seq=seq,
            op=first.op,
            bucket=size_bucket(first.size_bytes),
            size_bytes=first.size_bytes,
            starts=[r.start_s for r in recs],
            ends=[r.end_s for r in recs],
            hosts=[r.host for r in recs],
            step=max(steps) if steps else None,
        )
        group.joined.append(joined)
        group.count += 1
        group.last_step = joined.step if joined.step is not None else group.last_step
        group.fresh.setdefault((joined.op, joined.bucket), []).append(joined.own_s)

    # ---- evaluating ---------------------------------------------------------------------------------

    def evaluate(self, now: float | None = None) -> list[Alert]:
        """One evaluation; returns the alerts raised by it (cleared ones are logged)."""
        now = time.time() if now is None else now
        self.evaluations += 1
        seen: set[tuple[str, str, str, int | None]] = set()
        candidates: dict[tuple[str, str, str, int | None], tuple[str, JsonObject, int | None]] = {}
        earlier: dict[tuple[str, int], set[int] | None] = {}  # (group, steps back) -> the ranks flagged then
        for group in self.groups.values():
            self._stragglers(group, candidates)
            self._slowdowns(group, candidates)
        self._slow_groups(candidates)
        self._hangs(candidates)
        raised = []
        for key, (text, detail, step) in candidates.items():
            seen.add(key)
            self._streak[key] = self._streak.get(key, 0) + 1
            self._clean.pop(key, None)
            self._clean_since.pop(key, None)
            progress, needed = self._progress(key)
            since = self._since.setdefault(key, progress)
            # a straggler must stay flagged while half a window of new collectives arrived: overlapping
            # windows are not independent evidence, and a rank the scheduler slows for a moment is no straggler
            fresh = progress - since >= needed
            confirmed = self._streak[key] >= self.settings.persist and fresh
            if not confirmed and key not in self.active and key[0] == "straggler":
                # counted in the job's own steps, whatever the polling cadence: the windows that ended `needed`
                # steps (collectives) apart before this one, judged from the collectives held, flag it too
                confirmed = self._flagged_before(key, needed, earlier)
            if key not in self.active and confirmed:
                kind, group_name, op, rank = key
                op = str(detail.get("collective", op))
                alert = Alert(kind, group_name, op, rank, text, now, step, detail=detail)
                self.active[key] = alert
                self.history.append(alert)
                del self.history[:-1000]
                raised.append(alert)
                log.warning("alert %s: %s", kind, text)
                if self.metrics is not None:
                    self.metrics.raised(alert)
        for key in list(self._streak):
            if key not in seen:
                self._streak.pop(key, None)
                self._since.pop(key, None)
        # an active alert counts its clean evaluations itself: its streak is gone after the first one. A
        # straggler's clean evaluations must also span `needed` steps (collectives), as its flagged ones did:
        # raised as soon as the job's steps confirm it, it must not clear on two evaluations a few steps apart
        for key in list(self.active):
            if key in seen:
                continue
            self._clean[key] = self._clean.get(key, 0) + 1
            progress, needed = self._progress(key)
            since = self._clean_since.setdefault(key, progress)
            if self._clean[key] >= self.settings.persist and progress - since >= needed:
                alert = self._clear(self.active.pop(key), now)
                self._clean.pop(key, None)
                self._clean_since.pop(key, None)
                log.info("cleared %s: %s", alert.kind, alert.text)
                if self.metrics is not None:
                    self.metrics.cleared(alert)
        if self.metrics is not None:
            self.metrics.lateness(self.lateness)
        return raised

    def _clear(self, alert: Alert, now: float) -> Alert:
        """``alert`` cleared at ``now``, in the history in its place."""
        cleared = replace(alert, cleared_at_s=now)
        for i in range(len(self.history) - 1, -1, -1):
            if self.history[i] is alert:
                self.history[i] = cleared
                break
        return cleared

    def _progress(self, key: tuple[str, str, str, int | None]) -> tuple[int, int]:
        """(how far the key's group has come, how far it must come while flagged): steps, else collectives."""
        group = self.groups.get(key[1])
        if key[0] != "straggler" or group is None:
            return 0, 0
        if group.last_step is not None:
            return group.last_step, max(2, self.settings.window_steps // self.settings.fresh_divisor)
        return group.count, max(2, self.settings.window // self.settings.fresh_divisor)

    def _flagged_before(
        self, key: tuple[str, str, str, int | None], needed: int, cache: dict[tuple[str, int], set[int] | None]
    ) -> bool:
        """Whether the straggler method named ``key``'s rank in each of the ``max(1, persist - 1)`` windows that
        ended ``needed``, ``2 * needed``, ... steps (collectives, in jobs that mark no steps) before the latest.

        What evaluations that many steps apart would have shown, whenever the collector happened to evaluate.
        A window not available (too little history held, or inside the warm-up) is no confirmation: the
        evaluation-count rule still applies. Judged at most once per group and window in an evaluation
        (``cache``), and only while the latest window flags a rank not yet alerted on.
        """
        group = self.groups.get(key[1])
        if group is None or needed < 1:
            return False
        for k in range(1, max(1, self.settings.persist - 1) + 1):
            back = k * needed
            if (group.name, back) not in cache:
                flagged: dict[Any, Any] = {}
                cache[(group.name, back)] = (
                    {r for (_, _, _, r) in flagged} if self._stragglers(group, flagged, back) else None
                )
            ranks = cache[(group.name, back)]
            if ranks is None or key[3] not in ranks:
                return False
        return True

    def _recent(self, group: _Group, back: int = 0) -> tuple[list[_Joined], int]:
        """The collectives the straggler method looks at, and the fewest occurrences a label needs.

        ``back``: the window that ended that many steps (collectives, in jobs that mark no steps) before the
        latest, from the collectives still held (none: not enough history, or inside the warm-up).
        """
        s = self.settings
        joined = list(group.joined)
        if group.last_step is not None:
            last = group.last_step - back
            first = last - s.window_steps + 1
            if first < s.warmup_steps:
                # a window reaching into the warm-up holds fewer steps than it asks for, the job's noisiest (a
                # healthy CI run's rank was named at step 20, confirmed by a window of at most steps 10-15): no
                # verdict from it
                return [], 0
            recent = [j for j in joined if j.step is not None and j.step >= first and (not back or j.step <= last)]
            recent = recent[-MAX_WINDOW:]
            steps = {j.step for j in recent}
            return (recent, max(2, s.window_steps // 3)) if len(steps) >= s.window_steps // 2 else ([], 0)
        if back:
            joined = joined[:-back]
        warmup = s.window if s.warmup_steps else 0
        recent = joined[-s.window :]
        if not recent or recent[0].seq < warmup:  # reaching into the warm-up: no verdict, as above
            return [], 0
        return (recent, max(2, s.window // 4)) if len(recent) >= s.window // 2 else ([], 0)

    def _stragglers(self, group: _Group, out: dict[Any, Any], back: int = 0) -> bool:
        """The ranks the straggler method names over the latest window (``back``: the one that ended that many
        steps before) into ``out``; False when that window carries no verdict. Only the latest window's
        lateness goes to the ``lateness`` metric."""
        s = self.settings
        joined, min_occurrences = self._recent(group, back)
        if not joined or len(group.ranks) < 2:
            return False
        labels: dict[str, list[_Joined]] = {}
        for j in joined:
            labels.setdefault(f"{j.op} {format_size(j.bucket)}", []).append(j)
        # A threshold that scales with the job: lateness must be a real share of the time between collectives,
        # and stand out of the ranks' own arrival jitter (scheduler noise on an oversubscribed host)
        threshold = max(s.late_threshold_s, s.late_fraction * _interval(joined), s.jitter_k * _arrival_jitter(joined))
        hosts = tuple(joined[-1].hosts)
        table = CollectiveTable(
            source=f"monitor group {group.name}",
            ranks=group.ranks,
            hosts=hosts,
            starts_s={k: [j.starts for j in v] for k, v in labels.items()},
            ends_s={k: [j.ends for j in v] for k, v in labels.items()},
            arrival_known=True,
            synchronizing=frozenset(k for k, v in labels.items() if is_synchronizing(v[0].op)),
            span="cpu",
        )
        params = StragglerParams(
            late_threshold_s=threshold,
            slow_factor=s.slow_factor,
            end_spread_s=s.end_spread_s,
            min_occurrences=min_occurrences,
        )
        try:
            report = detect_stragglers(table, params)
        except StragglerError as e:
            log.debug("group %s: no straggler verdict this time (%s)", group.name, e)
            return False
        if not back:
            latest: dict[tuple[str, int], float] = {}
            for row in report.ranks_table:
                late = row["lateness_p50_s"]
                if late is not None:
                    key = (group.name, row["rank"])
                    latest[key] = max(latest.get(key, 0.0), late)  # the label latest to arrive at stands for it
            self.lateness.update(latest)
        last_fraction = {(row["op"], row["rank"]): row["last_arrival_fraction"] for row in report.ranks_table}
        for st in report.stragglers:
            share = last_fraction.get((st.op, st.rank))
            if st.kind == "late_arrival" and share is not None and share < s.last_fraction:
                continue  # late on the median but not the last to arrive most of the time: not a straggler
            host = self.hosts.get(st.rank)
            where = f" (host {host})" if host else ""
            how = "arrives late at" if st.kind == "late_arrival" else "is slow within"
            text = (
                f"rank {st.rank}{where} {how} {group.name} {st.op} by {st.excess_s * 1e3:.1f} ms "
                f"(median over the last {len(joined)} collectives; {report.clock_method})"
            )
            if group.last_step is not None:
                text += f"; at step {group.last_step}"
            akey = ("straggler", group.name, "", st.rank)
            if akey in out and out[akey][1]["excess_s"] >= st.excess_s:
                continue  # one alert per rank and group: the collective it is latest at speaks for it
            out[akey] = (
                text,
                {"straggler_kind": st.kind, "excess_s": st.excess_s, "host": host, "collective": st.op},
                group.last_step,
            )
        return True

    def _slowdowns(self, group: _Group, out: dict[Any, Any]) -> None:
        s = self.settings
        for key, fresh in group.fresh.items():
            hist = group.history.setdefault(key, deque(maxlen=group.history_len))
            if len(fresh) >= s.point_samples:
                hist.append(statistics.median(fresh))
                fresh.clear()
            # judged on every evaluation, fresh point or not: an evaluation between two flushes of the ranks'
            # records must not break the run of evaluations an alert needs
            op, bucket = key
            label = f"{op} {format_size(bucket)}"
            if len(hist) >= 8:
                changes = find_changes(list(hist), DetectSettings(min_change=s.min_change, alpha=s.alpha))
                if changes and changes[-1].is_regression:
                    c = changes[-1]
                    text = (
                        f"{group.name} {label}: own time up {c.change:+.0%} "
                        f"({c.mean_before_s * 1e3:.2f} -> {c.mean_after_s * 1e3:.2f} ms, p={c.p_value:.1g}), "
                        f"still at the slower level"
                    )
                    out[("slowdown", group.name, label, None)] = (
                        text,
                        {"before_s": c.mean_before_s, "after_s": c.mean_after_s, "p_value": c.p_value},
                        group.last_step,
                    )
            exp = self.expectations
            if s.below_expected and exp is not None and hist:
                e = exp.expected(op, bucket, group.ranks)
                if e is not None and hist[-1] > 0:
                    ratio = e.time_s / hist[-1]
                    if ratio < s.below_expected:
                        out[("below_expected", group.name, label, None)] = (
                            f"{label} on the {group.name} group: {ratio:.0%} of expected ({exp.description})",
                            {"ratio": ratio},
                            group.last_step,
                        )

    def note_inflight(self, rank: int, inflight: InFlight | None) -> None:
        """What a rank's endpoint said it is waiting in (None: nothing)."""
        self.inflight[rank] = inflight

    def _hangs(self, out: dict[Any, Any]) -> None:
        """A collective in flight past ``hang_after_s`` on some ranks of its group: the others are suspects."""
        waiting: dict[tuple[str, int], dict[int, float]] = {}
        for rank, info in self.inflight.items():  # checked by the source (EndpointSource._take)
            if info and info["age_s"] > self.settings.hang_after_s:
                waiting.setdefault((info["group"], info["seq"]), {})[rank] = info["age_s"]
        for (name, seq), ranks in waiting.items():
            group = self.groups.get(name)
            members = group.ranks if group is not None else tuple(sorted(ranks))
            missing = [r for r in members if r not in ranks]
            ages = sorted(ranks.values())
            text = f"group {name} collective #{seq} in flight for {ages[-1]:.0f} s on ranks {_list(sorted(ranks))}" + (
                f"; rank {_list(missing)} never joined it" if missing else ""
            )
            suspect = missing[0] if len(missing) == 1 else None
            out[("hang", name, "", suspect)] = (
                text,
                {"seq": seq, "waiting": sorted(ranks), "missing": missing},
                group.last_step if group is not None else None,
            )
        for report in self.hang_reports[-100:]:
            rank = report["rank"]  # checked by the source (_hang_report)
            text = f"rank {rank} reported a hang: {report['reason']}"
            out[("hang", "", "", rank)] = (text, {"dump_dir": report["dump_dir"]}, None)

    def _slow_groups(self, out: dict[Any, Any]) -> None:
        s = self.settings
        peers: dict[tuple[str, int, int], list[tuple[str, float]]] = {}
        for group in self.groups.values():
            for (op, bucket), hist in group.history.items():
                if len(hist) >= 3:
                    tail = list(hist)[-5:]
                    peers.setdefault((op, bucket, len(group.ranks)), []).append((group.name, statistics.median(tail)))
        for (op, bucket, _n), members in peers.items():
            if len(members) < 3:
                continue
            for name, own in members:
                others = statistics.median(o for g, o in members if g != name)
                if others > 0 and own > s.slow_factor * others and own - others > s.late_threshold_s:
                    label = f"{op} {format_size(bucket)}"
                    out[("slow_group", name, label, None)] = (
                        f"group {name} runs {label} in {own * 1e3:.2f} ms, its {len(members) - 1} peer groups in "
                        f"{others * 1e3:.2f} ms ({own / others:.1f}x)",
                        {"own_s": own, "peers_s": others},
                        self.groups[name].last_step,
                    )

    def summary(self) -> JsonObject:
        return {
            "records": self.records,
            "rejected": self.rejected,
            "dropped_incomplete": self.dropped,
            "evaluations": self.evaluations,
            "groups": {
                g.name: {"ranks": list(g.ranks), "joined": g.count, "pending": len(g.pending), "last_step": g.last_step}
                for g in self.groups.values()
            },
            "sources": [s.status() for s in self.sources],
            "active": [a.as_dict() for a in self.active.values()],
            "alerts": [a.as_dict() for a in self.history],
        }


# ---- sources ----------------------------------------------------------------------------------------


def parse_endpoints(texts: Iterable[str]) -> list[tuple[str, int]]:
    """``127.0.0.1:9750-9753`` or ``host:port`` (repeatable) into (host, port) pairs."""
    out: list[tuple[str, int]] = []
    for text in texts:
        host, sep, ports = text.rpartition(":")
        if not sep or not host:
            raise CollectError(f"endpoint {text!r}: expected HOST:PORT or HOST:FIRST-LAST")
        lo_text, _, hi_text = ports.partition("-")
        try:
            lo = int(lo_text)
            hi = int(hi_text) if hi_text else lo
        except ValueError:
            raise CollectError(f"endpoint {text!r}: the port must be a number or a range FIRST-LAST") from None
        if not (1 <= lo <= hi <= 65535) or hi - lo >= 1024:
            raise CollectError(f"endpoint {text!r}: ports must be in 1..65535, at most 1024 of them")
        out.extend((host, p) for p in range(lo, hi + 1))
    return out


class SourceProblem(CommlensError, ValueError):
    """One source's answer that cannot be used (unreachable, too slow, malformed); the others go on."""

    def __init__(self, state: str, message: str) -> None:
        super().__init__(message)
        self.state = state  # "unreachable", "timeout" (the endpoint's own state: unreachable) or "bad"


def _count(value: Any, name: str, *, at_least: int = 0) -> int:
    """``value`` as a count: an int (not a bool) in [at_least, 2**63); a SourceProblem naming ``name`` else."""
    if not isinstance(value, int) or isinstance(value, bool) or not at_least <= value < MAX_COUNT:
        raise SourceProblem("bad", f"{name} is {_show(value)}, not an integer in [{at_least}, 2**63)")
    return value


class HangReport(TypedDict):
    """A rank's own hang line (JSONL), its fields checked by :func:`_hang_report`."""

    rank: int
    reason: str
    dump_dir: str


class InFlight(TypedDict):
    """A rank's oldest collective not completed, as its endpoint said (checked by :func:`_inflight`)."""

    group: str
    seq: int
    age_s: float


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
    return text[:40] + ("..." if len(text) > 40 else "")


def _inflight(value: Any) -> InFlight | None:
    """A rank's ``inflight`` (its oldest collective not completed): {group, seq, age_s}, checked; None: none."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SourceProblem("bad", f"inflight is {_show(value)}, not an object")
    group, age = value.get("group"), value.get("age_s")
    if not isinstance(group, str) or len(group) > 200:
        raise SourceProblem("bad", "inflight.group is not a string of at most 200 characters")
    if not isinstance(age, (int, float)) or isinstance(age, bool) or not (math.isfinite(age) and age >= 0):
        raise SourceProblem("bad", f"inflight.age_s is {_show(age)}, not a finite number >= 0")
    return {"group": group, "seq": _count(value.get("seq"), "inflight.seq"), "age_s": float(age)}


def _json(body: bytes, what: str) -> Any:
    try:
        return json.loads(body)
    except RecursionError:  # nesting deeper than the parser's stack
        raise SourceProblem("bad", f"{what} is JSON nested too deeply") from None
    except ValueError as e:
        raise SourceProblem("bad", f"{what} is not JSON: {str(e)[:80]}") from None


class EndpointSource:
    """One rank's ``/records`` endpoint, read by cursor, every field of its answer checked.

    A poll that fails leaves the cursor where it was and says why in ``state`` (``waiting`` before the first
    answer, ``ok``, ``unreachable``: no connection, an HTTP error or past the deadline; ``bad``: an answer
    that is not what a commlens monitor endpoint sends) and ``problem``. Every request has a connect timeout
    and a total deadline: an endpoint that sends a byte a second cannot hold the collector.
    """

    kind = "endpoint"

    def __init__(
        self, host: str, port: int, token: str | None = None, timeout_s: float = 2.0, max_bytes: int = 64 << 20
    ) -> None:
        self.host, self.port = host, port
        self.url = f"http://{host}:{port}"
        self.label = f"{host}:{port}"
        self.token = token
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.cursor = 0
        self.lost = 0
        self.info: JsonObject | None = None
        self.reachable = False
        self.answered = False  # once it sent a valid answer
        self.state = "waiting"
        self.problem: str | None = None
        self.failures = 0  # polls that failed
        self.bad_records = 0  # records of valid answers that were not valid records
        self.inflight: InFlight | None = None
        self.rank: int | None = None

    def _get(self, path: str, deadline: float) -> Any:
        from commlens.monitor.fetch import FetchError, http_get

        what = path.split("?")[0]
        try:
            status, body = http_get(
                self.host,
                self.port,
                path,
                timeout_s=self.timeout_s,
                deadline=deadline,
                max_bytes=self.max_bytes,
                headers={"Authorization": f"Bearer {self.token}"} if self.token else None,
            )
        except FetchError as e:
            state = {"bad": "bad", "timeout": "timeout"}.get(e.kind, "unreachable")
            raise SourceProblem(state, f"{what}: {e}") from None
        if status != 200:
            hint = " (the endpoint needs the job's monitor token)" if status == 401 else ""
            raise SourceProblem("unreachable", f"HTTP {status} for {what}{hint}")
        return _json(body, f"its answer to {what}")

    def poll(self, end: float | None = None) -> list[CollectiveRecord]:
        """What the rank recorded since the last poll; [] with ``state``/``problem`` set when it failed.

        ``end`` (a ``time.monotonic()`` instant) is when the collector stops: the poll never runs past it."""
        now = time.monotonic()
        cut = end is not None and end < now + self.timeout_s  # the collector ends before the poll's own timeout
        deadline = min(end, now + self.timeout_s) if end is not None else now + self.timeout_s
        if deadline - now < MIN_POLL_S:  # the collector's time is up: no poll, no verdict
            return []
        try:
            if self.info is None:
                info = self._get("/job", deadline)
                if not isinstance(info, dict):
                    raise SourceProblem("bad", f"/job is {_show(info)}, not an object")
                self.info = info
            out = self._take(self._get(f"/records?after={self.cursor}", deadline))
        except SourceProblem as e:
            if e.state == "timeout" and cut:  # the collector's end came first: no verdict on the endpoint
                return []
            self.reachable = e.state == "bad"  # it answered, badly
            self.state = "bad" if e.state == "bad" else "unreachable"
            self.problem = str(e)
            self.failures += 1
            return []
        self.reachable = self.answered = True
        self.state, self.problem = "ok", None
        return out

    def _take(self, data: Any) -> list[CollectiveRecord]:
        """The records of one ``/records`` answer; every field checked before any is used."""
        if not isinstance(data, dict):
            raise SourceProblem("bad", f"/records is {_show(data)}, not an object")
        records = data.get("records")
        if not isinstance(records, list):
            raise SourceProblem("bad", "/records has no records list")
        nxt = _count(data.get("next"), "next")
        if nxt < self.cursor:
            raise SourceProblem("bad", f"next cursor {nxt} is before the one asked for ({self.cursor})")
        lost = _count(data.get("lost", 0), "lost")
        inflight = _inflight(data.get("inflight"))
        rank = data.get("rank")
        if rank is not None:
            rank = _count(rank, "rank")
        out: list[CollectiveRecord] = []
        for d in records:
            try:
                out.append(record_from_wire(d))
            except CollectiveRecordError:
                self.bad_records += 1
        self.cursor, self.lost, self.inflight, self.rank = nxt, self.lost + lost, inflight, rank
        return out

    def status(self) -> JsonObject:
        return {
            "source": self.label,
            "kind": self.kind,
            "state": self.state,
            "problem": self.problem,
            "failures": self.failures,
            "bad_records": self.bad_records,
            "rank": self.rank,
        }


class JsonlSource:
    """The ranks' ``monitor-rank<R>.jsonl`` files in a directory, tailed (a line at a time, bounded).

    Only regular files are read (a FIFO or a link to a device is refused by name, once), opened without
    blocking, at most ``MAX_POLL_BYTES`` of each a poll. A line that is not a record, a hang report or the
    end mark, or whose fields are wrong, is counted in ``bad_lines`` and skipped.
    """

    kind = "jsonl"

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise CollectError(f"{self.directory}: not a directory of monitor JSONL files")
        self.label = str(self.directory)
        self.offsets: dict[Path, int] = {}
        self.bad_lines = 0
        self.ended: set[Path] = set()
        self.hangs: list[HangReport] = []
        self.refused: dict[Path, str] = {}  # files that are not regular files, and what they are
        self.state = "waiting"
        self.problem: str | None = None
        self.answered = False

    def wrong_directory(self) -> str | None:
        """Why the directory is surely not the job's (no monitor file, but one in a directory under it)."""
        if self.files():
            return None
        try:
            below = sorted(p.parent for p in self.directory.glob("*/monitor-rank*.jsonl"))
        except OSError:
            below = []
        if below:
            return f"{self.directory} holds no monitor-rank<R>.jsonl file, {below[0]} does: did you mean --jsonl {below[0]}?"
        return None

    def files(self) -> list[Path]:
        out = []
        for path in sorted(self.directory.glob("monitor-rank*.jsonl")):
            try:
                mode = path.stat().st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode):
                out.append(path)
            elif path not in self.refused:
                self.refused[path] = (
                    "a FIFO"
                    if stat.S_ISFIFO(mode)
                    else "a device"
                    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "not a regular file"
                )
                log.warning("%s: %s, not read (only regular files are)", path, self.refused[path])
        return out

    def poll(self, end: float | None = None) -> list[CollectiveRecord]:
        out: list[CollectiveRecord] = []
        files = self.files()
        for path in files:
            out.extend(self._tail(path))
        if files:
            self.answered = True
            self.state, self.problem = "ok", None
        else:
            self.problem = f"no monitor-rank<R>.jsonl file in {self.directory} yet"
        return out

    def _tail(self, path: Path) -> list[CollectiveRecord]:
        offset = self.offsets.get(path, 0)
        out: list[CollectiveRecord] = []
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise CollectError(f"{path}: {e.strerror or e}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the check and the open
                self.refused.setdefault(path, "not a regular file")
                return out
            with os.fdopen(fd, "rb", closefd=False) as fp:
                fp.seek(offset)
                limit = offset + MAX_POLL_BYTES
                while fp.tell() < limit:
                    line = fp.readline(MAX_LINE_BYTES + 1)
                    if not line:
                        break
                    if not line.endswith(b"\n"):
                        if len(line) > MAX_LINE_BYTES:  # a line this long is no record: skip past it
                            self.bad_lines += 1
                            while line and not line.endswith(b"\n"):
                                line = fp.readline(MAX_LINE_BYTES + 1)
                            offset = fp.tell()
                            continue
                        break  # a line still being written: read it next time
                    offset = fp.tell()
                    rec = self._record(line, path)
                    if rec is not None:
                        out.append(rec)
        except OSError as e:
            raise CollectError(f"{path}: {e.strerror or e}") from None
        finally:
            os.close(fd)
            self.offsets[path] = offset
        return out

    def _record(self, line: bytes, path: Path) -> CollectiveRecord | None:
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            self.bad_lines += 1
            return None
        if not isinstance(obj, dict):
            self.bad_lines += 1
            return None
        kind = obj.get("type")
        if kind == "end":
            self.ended.add(path)
            return None
        if kind == "hang":
            report = _hang_report(obj)
            if report is None:
                self.bad_lines += 1
            else:
                self.hangs.append(report)
            return None
        if kind != "record":
            return None
        try:
            return record_from_wire(obj)
        except CollectiveRecordError:
            self.bad_lines += 1
            return None

    @property
    def done(self) -> bool:
        files = self.files()
        return bool(files) and all(p in self.ended for p in files)

    def shown_state(self) -> tuple[str, str | None]:
        """The state and problem a summary shows: ``bad`` while a file is refused, naming the files."""
        problem = self.problem
        if self.refused:
            problem = "; ".join(f"{p.name}: {what}, not read" for p, what in list(self.refused.items())[:4])
        return ("bad" if self.refused and self.state == "ok" else self.state), problem

    def status(self) -> JsonObject:
        state, problem = self.shown_state()
        return {
            "source": self.label,
            "kind": self.kind,
            "state": state,
            "problem": problem,
            "failures": 0,
            "bad_records": self.bad_lines,
            "rank": None,
        }


def _hang_report(obj: Mapping[str, object]) -> HangReport | None:
    """A rank's hang line, its fields checked: {rank, reason, dump_dir}; None when they are not as written."""
    rank, reason, dump_dir = obj.get("rank"), obj.get("reason", ""), obj.get("dump_dir", "")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < MAX_COUNT:
        return None
    if not isinstance(reason, str) or not isinstance(dump_dir, (str, type(None))):
        return None
    return HangReport(rank=rank, reason=reason[:300], dump_dir=(dump_dir or "")[:500])


def replay(records: Iterable[CollectiveRecord], collector: Collector, interval_s: float = 0.25) -> list[Alert]:
    """Feed ``records`` in order of completion and evaluate every ``interval_s`` of the job's own time.

    What the live collector would have seen polling at that interval (a file read after the job ended).
    """
    ordered = sorted(records, key=lambda r: r.end_s)
    raised: list[Alert] = []
    if not ordered:
        return raised
    next_at = ordered[0].end_s + interval_s
    batch: list[CollectiveRecord] = []
    for rec in ordered:
        if rec.end_s >= next_at:
            collector.add(batch)
            batch = []
            raised.extend(collector.evaluate(next_at))
            while next_at <= rec.end_s:
                next_at += interval_s
        batch.append(rec)
    collector.add(batch)
    raised.extend(collector.evaluate(next_at))
    return raised


def warm_up() -> None:
    """Load what the detectors import on first use (ruptures, scipy.stats: over a second of CPU here) now.

    Loaded lazily, they came in at the first evaluation with enough history, a few seconds into the job
    it watches, and on a machine the job's ranks share that burst slowed the very collectives being
    measured: enough, on 2 cores, for a slowdown alert before anything had changed.
    """
    find_changes([1.0] * 8 + [2.0] * 8, DetectSettings())


def collect(
    sources: list[EndpointSource | JsonlSource],
    collector: Collector,
    *,
    interval_s: float = 0.25,
    duration_s: float | None = None,
    idle_exit_s: float | None = 15.0,
    start_wait_s: float | None = 60.0,
    warn_every_s: float = 30.0,
    should_stop: Any = None,
) -> None:
    """Poll ``sources`` and evaluate every ``interval_s`` until ``duration_s``, the job ends, or asked to stop.

    The job has ended when every JSONL file says so, or when no endpoint has answered for ``idle_exit_s``
    after records were seen (the ranks' endpoints close with the job; a hung job's still answer).

    Endpoints are polled at once, each request with a total deadline (never past ``duration_s``). A source
    that fails (unreachable, a bad answer) is a warning at once and every ``warn_every_s`` while it lasts,
    a metric when the collector has them, and a state in :meth:`Collector.summary`; the other sources are
    judged on. No source ever answering within ``start_wait_s`` (or ``duration_s``) is a CollectError.
    """
    warm_up()
    started = last_record = time.monotonic()
    seen_any = False
    warned: dict[int, tuple[str, float]] = {}
    collector.sources = sources
    endpoints = [s for s in sources if isinstance(s, EndpointSource)]
    files = [s for s in sources if isinstance(s, JsonlSource)]
    for source in files:
        wrong = source.wrong_directory()
        if wrong is not None:
            raise CollectError(wrong)
        if not source.files():
            log.warning(
                "%s: no monitor-rank<R>.jsonl file yet; waiting for the job's ranks to write them", source.label
            )
    pool = ThreadPoolExecutor(
        max_workers=min(MAX_POLL_THREADS, len(endpoints)) or 1, thread_name_prefix="commlens-poll"
    )
    running: dict[int, Future[list[CollectiveRecord]]] = {}
    try:
        while True:
            now = time.monotonic()
            end = started + duration_s if duration_s is not None else math.inf
            for i, ep in enumerate(endpoints):
                if i not in running:  # a poll still running (past its deadline by a hair) is not doubled
                    running[i] = pool.submit(ep.poll, None if math.isinf(end) else end)
            got = 0
            for source in files:
                records = source.poll()
                got += len(records)
                collector.add(records)
                if source.hangs:
                    collector.hang_reports.extend(source.hangs)
                    source.hangs.clear()
            if running:
                # a slow endpoint's poll goes on in its thread (to its deadline) while the others are judged
                wait_futures(list(running.values()), timeout=interval_s)
            for i, future in list(running.items()):
                if not future.done():
                    continue
                del running[i]
                endpoint = endpoints[i]
                records = future.result()
                got += len(records)
                collector.add(records)
                if endpoint.rank is not None:
                    collector.note_inflight(endpoint.rank, endpoint.inflight)
            now = time.monotonic()
            _report_sources(sources, collector, warned, now, warn_every_s)
            if got:
                seen_any, last_record = True, now
            collector.evaluate(time.time())
            answered = any(s.answered for s in sources)
            if not answered and start_wait_s is not None and now - started >= start_wait_s:
                raise CollectError(_nothing_answered(sources, now - started))
            if now >= end:
                if not answered:
                    raise CollectError(_nothing_answered(sources, now - started))
                return
            if files and len(files) == len(sources) and all(s.done for s in files) and not got:
                return
            live = any(s.reachable for s in endpoints)
            if idle_exit_s is not None and seen_any and not live and now - last_record > idle_exit_s:
                return
            if should_stop is not None and should_stop():
                return
            time.sleep(max(0.0, min(interval_s - (time.monotonic() - now), end - time.monotonic())))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _report_sources(
    sources: list[EndpointSource | JsonlSource],
    collector: Collector,
    warned: dict[int, tuple[str, float]],
    now: float,
    every_s: float,
) -> None:
    """A warning when a source starts failing (and every ``every_s`` while it does), a line when it recovers."""
    for i, source in enumerate(sources):
        state, problem = source.state, source.problem
        if isinstance(source, JsonlSource):
            state, problem = source.shown_state()
        before = warned.get(i)
        if state in ("unreachable", "bad"):
            if before is None or before[0] != state or now - before[1] >= every_s:
                others = "; the other sources are still judged" if len(sources) > 1 else ""
                log.warning("%s %s: %s (%s)%s", source.kind, source.label, state, problem, others)
                warned[i] = (state, now)
        elif before is not None and state == "ok":
            log.info("%s %s answers again", source.kind, source.label)
            del warned[i]
        if collector.metrics is not None:
            collector.metrics.source_state(source.label, state)


def _nothing_answered(sources: list[EndpointSource | JsonlSource], waited_s: float) -> str:
    problems = [f"{s.label} ({s.problem or s.state})" for s in sources]
    shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
    return f"no source answered in {waited_s:.0f} s: {shown}"
