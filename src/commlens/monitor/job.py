"""The collector's job as one typed record, and the one call that runs it: ``run_collector(CollectorJob)``,
which returns a :class:`CollectorReport`.

``commlens monitor collect`` builds a :class:`CollectorJob` from its options and renders the report (``--json``:
``report.as_dict()``); a Python caller builds the same record and gets the same report. The job is checked when it is made
(:class:`~commlens.monitor.collect.CollectError`, exit 2): a collector that cannot start fails before it
binds a port or polls a rank.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from commlens.monitor.collect import (
    Alert,
    CollectError,
    Collector,
    CollectSettings,
    EndpointSource,
    JsonlSource,
    collect,
    parse_endpoints,
    replay,
)
from commlens.results.collectives import CollectiveRecord
from commlens.results.jsonvalue import JsonObject

__all__ = ["CollectorJob", "CollectorReport", "GroupState", "ModelSpec", "SourceState", "run_collector"]

log = logging.getLogger("commlens.monitor")


@dataclass(frozen=True)
class ModelSpec:
    """The cost model a below-expectation alert compares with: a topology (preset or file), the job's backend
    and its ranks per host (0: one)."""

    topology: str
    backend: str = "gloo"
    ranks_per_host: int = 0


@dataclass(frozen=True)
class CollectorJob:
    """Where the ranks' records come from, how they are judged, and where the collector's metrics go.

    Sources: ``endpoints`` (``HOST:PORT`` or ``HOST:FIRST-LAST``, polled live), ``jsonl`` (a directory of
    the ranks' files, tailed), and records already read (NCCL Inspector output, given to
    :func:`run_collector`). ``replay`` evaluates files as the live collector would have, in the job's own time.
    """

    endpoints: tuple[str, ...] = ()
    jsonl: Path | None = None
    has_records: bool = False  # records read elsewhere (NCCL Inspector output) come with the call
    replay: bool = False
    settings: CollectSettings = field(default_factory=CollectSettings)
    model: ModelSpec | None = None
    interval_s: float = 0.25
    duration_s: float | None = None
    idle_exit_s: float = 15.0
    start_wait_s: float = 60.0
    poll_timeout_s: float = 2.0
    token: str | None = None
    metrics_port: int | None = None  # serve the collector's own metrics here (None: not at all)
    metrics_host: str = "127.0.0.1"
    job_id: str = ""

    def __post_init__(self) -> None:
        if not (self.endpoints or self.jsonl is not None or self.has_records):
            raise CollectError("give the job's --endpoint HOST:PORT..., a --jsonl directory, or --inspector output")
        if self.replay and self.endpoints:
            raise CollectError("--replay reads files (--jsonl, --inspector); the endpoints are live")
        for name, value in (
            ("--interval", self.interval_s),
            ("--start-wait", self.start_wait_s),
            ("--timeout", self.poll_timeout_s),
        ):
            if not (value > 0 and math.isfinite(value)):
                raise CollectError(f"{name} {value}: must be a number > 0")
        if self.duration_s is not None and not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise CollectError(f"--duration {self.duration_s}: must be a number > 0")
        parse_endpoints(self.endpoints)  # a malformed endpoint is refused here, before any port is bound


@dataclass(frozen=True)
class GroupState:
    """One process group as the collector left it: its ranks, the collectives joined across them, those still
    waiting for a rank, and the last training step seen."""

    name: str
    ranks: tuple[int, ...]
    joined: int
    pending: int
    last_step: int | None

    def as_dict(self) -> JsonObject:
        return {"ranks": list(self.ranks), "joined": self.joined, "pending": self.pending, "last_step": self.last_step}


@dataclass(frozen=True)
class SourceState:
    """One source the collector read (an endpoint or a JSONL file), as it stood at the end."""

    source: str
    kind: str
    state: str  # ok, unreachable, bad, ...
    problem: str | None
    failures: int  # failed polls
    bad_records: int  # invalid records skipped
    rank: int | None

    @classmethod
    def from_status(cls, status: JsonObject) -> SourceState:
        """From a source's ``status()`` object."""
        problem, rank = status["problem"], status["rank"]
        return cls(
            source=str(status["source"]),
            kind=str(status["kind"]),
            state=str(status["state"]),
            problem=None if problem is None else str(problem),
            failures=_int(status["failures"]),
            bad_records=_int(status["bad_records"]),
            rank=None if rank is None else _int(rank),
        )

    def as_dict(self) -> JsonObject:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class CollectorReport:
    """What a collector run found: records read, rejected and dropped, evaluations, the groups, the sources'
    states, the alerts still active and every alert raised. ``as_dict()`` is what ``--json`` prints."""

    records: int
    rejected: int
    dropped_incomplete: int  # records of a collective that never completed on every rank
    evaluations: int
    groups: tuple[GroupState, ...]
    sources: tuple[SourceState, ...]
    active: tuple[Alert, ...]  # copies of the collector's, ``detail`` included
    alerts: tuple[Alert, ...]  # every alert raised, in order

    @classmethod
    def of(cls, collector: Collector) -> CollectorReport:
        """The report of ``collector`` as it stands."""
        return cls(
            records=collector.records,
            rejected=collector.rejected,
            dropped_incomplete=collector.dropped,
            evaluations=collector.evaluations,
            groups=tuple(
                GroupState(g.name, tuple(g.ranks), g.count, len(g.pending), g.last_step)
                for g in collector.groups.values()
            ),
            sources=tuple(SourceState.from_status(s.status()) for s in collector.sources),
            active=tuple(replace(a, detail=dict(a.detail)) for a in collector.active.values()),
            alerts=tuple(replace(a, detail=dict(a.detail)) for a in collector.history),
        )

    def as_dict(self) -> JsonObject:
        return {
            "records": self.records,
            "rejected": self.rejected,
            "dropped_incomplete": self.dropped_incomplete,
            "evaluations": self.evaluations,
            "groups": {g.name: g.as_dict() for g in self.groups},
            "sources": [s.as_dict() for s in self.sources],
            "active": [a.as_dict() for a in self.active],
            "alerts": [a.as_dict() for a in self.alerts],
        }


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"expected an int, got {value!r}")
    return value


def run_collector(
    job: CollectorJob,
    records: Sequence[CollectiveRecord] = (),
    *,
    note: Callable[[str], None] = log.info,
) -> CollectorReport:
    """Run the collector ``job`` describes until its sources end (or ``duration_s``, or Ctrl-C) and return
    its report (groups, sources, alerts). ``records``: ones read before (NCCL Inspector output), fed first.
    ``note`` hears where the metrics are served and an interruption."""
    expectations = None
    if job.model is not None:
        from commlens.monitor.expect import Expectations
        from commlens.topology import load_topology

        expectations = Expectations(load_topology(job.model.topology), job.model.backend, job.model.ranks_per_host or 1)
    collector = Collector(job.settings, expectations)
    server = None
    if job.metrics_port is not None:
        from commlens.monitor.exporter import CollectorMetrics, serve

        collector.metrics = CollectorMetrics(job.job_id)
        server = serve(job.metrics_host, job.metrics_port, collector.metrics.registry, token=job.token)
        note(f"collector metrics on http://{server.address[0]}:{server.address[1]}/metrics")
    try:
        _feed(job, records, collector, note)
    finally:
        if server is not None:
            server.close()
    return CollectorReport.of(collector)


def _feed(
    job: CollectorJob, records: Sequence[CollectiveRecord], collector: Collector, note: Callable[[str], None]
) -> None:
    sources: list[EndpointSource | JsonlSource] = [
        EndpointSource(h, p, job.token, timeout_s=job.poll_timeout_s) for h, p in parse_endpoints(job.endpoints)
    ]
    if job.jsonl is not None:
        sources.append(JsonlSource(job.jsonl))
    if records:
        if job.replay:
            replay(records, collector, job.interval_s)
        else:
            collector.add(list(records))
            collector.evaluate()
    if job.replay and job.jsonl is not None:
        replay([r for s in sources if isinstance(s, JsonlSource) for r in s.poll()], collector, job.interval_s)
    elif sources:
        try:
            collect(
                sources,
                collector,
                interval_s=job.interval_s,
                duration_s=job.duration_s,
                idle_exit_s=job.idle_exit_s,
                start_wait_s=job.start_wait_s,
            )
        except KeyboardInterrupt:
            note("interrupted: summary of what was collected")
