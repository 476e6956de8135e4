"""Online detection over a live job: join the ranks' records, name stragglers, slow groups and slowdowns.

:class:`Collector` is fed records (from the ranks' ``/records`` endpoints,
their JSONL files, or NCCL Inspector's output) and evaluated every few
seconds. It issues nothing to the job: no collective, no barrier.

- **Join.** Records are joined by (group, sequence number): a collective is
  complete when every rank of its group has reported it.
- **Stragglers.** Over the last ``window`` complete collectives of each
  group, :func:`commlens.diagnose.stragglers.detect_stragglers` (the method
  of ``commlens diagnose stragglers``) names late arrivers and ranks slow
  within. A rank named in ``persist`` evaluations in a row raises a
  ``straggler`` alert (``slow_within`` too); it clears after ``persist``
  clean evaluations.
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
import statistics
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.request import Request, urlopen

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
from commlens.results.units import format_size

__all__ = [
    "ALERT_KINDS",
    "Alert",
    "CollectError",
    "CollectSettings",
    "Collector",
    "EndpointSource",
    "JsonlSource",
    "collect",
    "parse_endpoints",
    "replay",
    "warm_up",
]

log = logging.getLogger("commlens.monitor")

ALERT_KINDS = ("straggler", "slow_group", "slowdown", "below_expected", "hang")
MAX_LINE_BYTES = 1 << 20
MAX_PENDING = 200_000  # collectives waiting for their last rank's record
MAX_WINDOW = 1024  # collectives the straggler method looks at, at most


class CollectError(CommlensError, ValueError):
    """A collector that cannot read its sources (a bad endpoint, an unreadable directory)."""


@dataclass(frozen=True)
class CollectSettings:
    window_steps: int = 10  # training steps of collectives the straggler method looks at (jobs that mark steps)
    window: int = 24  # complete collectives it looks at when the job marks no steps
    persist: int = 2  # evaluations in a row before an alert is raised (and clean ones before it clears)
    fresh_divisor: int = 2  # a straggler stays flagged while window / this many new steps (collectives) arrive
    late_threshold_s: float = 5e-3  # median lateness above the ranks' typical lateness by more than this
    late_fraction: float = 0.25  # ... and by more than this fraction of a training step (or of the interval
    # between collectives when the job marks no steps): what the scheduler's noise cannot do persistently
    last_fraction: float = 0.5  # a late arriver must be the last to arrive in at least this share
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
        if self.point_samples < 1:
            raise CollectError(f"point_samples must be >= 1, got {self.point_samples}")
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


@dataclass
class Alert:
    kind: str
    group: str
    op: str
    rank: int | None
    text: str
    raised_at_s: float
    step: int | None = None  # the training step the job was at (records' steps), when known
    cleared_at_s: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        return (self.kind, self.group, self.op, self.rank)

    def as_dict(self) -> dict[str, Any]:
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
        self._since: dict[tuple[str, str, str, int | None], int] = {}
        self.lateness: dict[tuple[str, int], float] = {}
        self.records = 0
        self.rejected = 0
        self.dropped = 0
        self.evaluations = 0
        self.hosts: dict[int, str] = {}
        self.inflight: dict[int, dict[str, Any] | None] = {}  # rank -> its oldest collective in flight
        self.hang_reports: list[dict[str, Any]] = []  # the ranks' own hang lines (JSONL)
        self.metrics: Any = None

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
        candidates: dict[tuple[str, str, str, int | None], tuple[str, dict[str, Any], int | None]] = {}
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
            progress, needed = self._progress(key)
            since = self._since.setdefault(key, progress)
            # a straggler must stay flagged while half a window of new collectives arrived: overlapping
            # windows are not independent evidence, and a rank the scheduler slows for a moment is no straggler
            fresh = progress - since >= needed
            if key not in self.active and self._streak[key] >= self.settings.persist and fresh:
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
                if key in self.active:
                    self._clean[key] = self._clean.get(key, 0) + 1
                    if self._clean[key] >= self.settings.persist:
                        alert = self.active.pop(key)
                        alert.cleared_at_s = now
                        self._clean.pop(key, None)
                        log.info("cleared %s: %s", alert.kind, alert.text)
                        if self.metrics is not None:
                            self.metrics.cleared(alert)
        if self.metrics is not None:
            self.metrics.lateness(self.lateness)
        return raised

    def _progress(self, key: tuple[str, str, str, int | None]) -> tuple[int, int]:
        """(how far the key's group has come, how far it must come while flagged): steps, else collectives."""
        group = self.groups.get(key[1])
        if key[0] != "straggler" or group is None:
            return 0, 0
        if group.last_step is not None:
            return group.last_step, max(2, self.settings.window_steps // self.settings.fresh_divisor)
        return group.count, max(2, self.settings.window // self.settings.fresh_divisor)

    def _recent(self, group: _Group) -> tuple[list[_Joined], int]:
        """The collectives the straggler method looks at, and the fewest occurrences a label needs."""
        s = self.settings
        joined = list(group.joined)
        if group.last_step is not None:
            first = group.last_step - s.window_steps + 1
            recent = [j for j in joined if j.step is not None and j.step >= first][-MAX_WINDOW:]
            steps = {j.step for j in recent}
            return (recent, max(2, s.window_steps // 3)) if len(steps) >= s.window_steps // 2 else ([], 0)
        recent = joined[-s.window :]
        return (recent, max(2, s.window // 4)) if len(recent) >= s.window // 2 else ([], 0)

    def _stragglers(self, group: _Group, out: dict[Any, Any]) -> None:
        s = self.settings
        joined, min_occurrences = self._recent(group)
        if not joined or len(group.ranks) < 2:
            return
        labels: dict[str, list[_Joined]] = {}
        for j in joined:
            labels.setdefault(f"{j.op} {format_size(j.bucket)}", []).append(j)
        # A threshold that scales with the job: lateness must be a real share of the time between collectives.
        threshold = max(s.late_threshold_s, s.late_fraction * _interval(joined))
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
            return
        latest: dict[tuple[str, int], float] = {}
        for row in report.ranks_table:
            if row.get("lateness_p50_s") is not None:
                key = (group.name, int(row["rank"]))
                # the label with the most lateness stands for the rank (a group runs several)
                value = float(row["lateness_p50_s"])
                latest[key] = max(latest.get(key, 0.0), value)
        self.lateness.update(latest)
        last_fraction = {(row["op"], int(row["rank"])): row.get("last_arrival_fraction") for row in report.ranks_table}
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

    def note_inflight(self, rank: int, inflight: dict[str, Any] | None) -> None:
        """What a rank's endpoint said it is waiting in (None: nothing)."""
        self.inflight[rank] = inflight

    def _hangs(self, out: dict[Any, Any]) -> None:
        """A collective in flight past ``hang_after_s`` on some ranks of its group: the others are suspects."""
        waiting: dict[tuple[str, int], dict[int, float]] = {}
        for rank, info in self.inflight.items():
            if info and float(info.get("age_s", 0.0)) > self.settings.hang_after_s:
                waiting.setdefault((str(info.get("group")), int(info.get("seq", -1))), {})[rank] = float(info["age_s"])
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
            rank = int(report.get("rank", -1))
            text = f"rank {rank} reported a hang: {str(report.get('reason', ''))[:300]}"
            out[("hang", "", "", rank)] = (text, {"dump_dir": str(report.get("dump_dir", ""))[:500]}, None)

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

    def summary(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "rejected": self.rejected,
            "dropped_incomplete": self.dropped,
            "evaluations": self.evaluations,
            "groups": {
                g.name: {"ranks": list(g.ranks), "joined": g.count, "pending": len(g.pending), "last_step": g.last_step}
                for g in self.groups.values()
            },
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


class EndpointSource:
    """One rank's ``/records`` endpoint, read by cursor."""

    def __init__(self, host: str, port: int, token: str | None = None, timeout_s: float = 2.0) -> None:
        self.url = f"http://{host}:{port}"
        self.token = token
        self.timeout_s = timeout_s
        self.cursor = 0
        self.lost = 0
        self.info: dict[str, Any] | None = None
        self.reachable = False
        self.inflight: dict[str, Any] | None = None
        self.rank: int | None = None

    def _get(self, path: str) -> Any:
        req = Request(self.url + path)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - an http URL we built
            body = resp.read(64 << 20)
        return json.loads(body)

    def poll(self) -> list[CollectiveRecord]:
        try:
            if self.info is None:
                self.info = self._get("/job")
            data = self._get(f"/records?after={self.cursor}")
        except (URLError, OSError, ValueError):
            self.reachable = False
            return []
        self.reachable = True
        if not isinstance(data, dict) or not isinstance(data.get("records"), list):
            return []
        self.cursor = int(data.get("next", self.cursor))
        self.lost += int(data.get("lost", 0))
        inflight = data.get("inflight")
        self.inflight = inflight if isinstance(inflight, dict) else None
        self.rank = data.get("rank") if isinstance(data.get("rank"), int) else None
        out: list[CollectiveRecord] = []
        for d in data["records"]:
            try:
                out.append(record_from_wire(d))
            except CollectiveRecordError:
                continue
        return out


class JsonlSource:
    """The ranks' ``monitor-rank<R>.jsonl`` files in a directory, tailed (a line at a time, bounded)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise CollectError(f"{self.directory}: not a directory of monitor JSONL files")
        self.offsets: dict[Path, int] = {}
        self.bad_lines = 0
        self.ended: set[Path] = set()
        self.hangs: list[dict[str, Any]] = []

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("monitor-rank*.jsonl"))

    def poll(self) -> list[CollectiveRecord]:
        out: list[CollectiveRecord] = []
        for path in self.files():
            out.extend(self._tail(path))
        return out

    def _tail(self, path: Path) -> Iterator[CollectiveRecord]:
        offset = self.offsets.get(path, 0)
        try:
            with open(path, "rb") as fp:
                fp.seek(offset)
                while True:
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
                        yield rec
        except OSError as e:
            raise CollectError(f"{path}: {e.strerror or e}") from None
        finally:
            self.offsets[path] = offset

    def _record(self, line: bytes, path: Path) -> CollectiveRecord | None:
        try:
            obj = json.loads(line)
        except ValueError:
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
            self.hangs.append(obj)
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
    should_stop: Any = None,
) -> None:
    """Poll ``sources`` and evaluate every ``interval_s`` until ``duration_s``, the job ends, or asked to stop.

    The job has ended when every JSONL file says so, or when no endpoint has answered for ``idle_exit_s``
    after records were seen (the ranks' endpoints close with the job; a hung job's still answer).
    """
    warm_up()
    started = last_record = time.time()
    seen_any = False
    while True:
        now = time.time()
        got = 0
        for source in sources:
            records = source.poll()
            got += len(records)
            collector.add(records)
            if isinstance(source, EndpointSource) and source.rank is not None:
                collector.note_inflight(source.rank, source.inflight)
            elif isinstance(source, JsonlSource) and source.hangs:
                collector.hang_reports.extend(source.hangs)
                source.hangs.clear()
        if got:
            seen_any, last_record = True, now
        collector.evaluate(now)
        if duration_s is not None and now - started >= duration_s:
            return
        files = [s for s in sources if isinstance(s, JsonlSource)]
        if files and len(files) == len(sources) and all(s.done for s in files) and not got:
            return
        live = any(isinstance(s, EndpointSource) and s.reachable for s in sources)
        if idle_exit_s is not None and seen_any and not live and now - last_record > idle_exit_s:
            return
        if should_stop is not None and should_stop():
            return
        time.sleep(max(0.0, interval_s - (time.time() - now)))
