"""The collector's job as one typed record, and the one call that runs it: ``run_collector(CollectorJob)``.

``commlens monitor collect`` builds a :class:`CollectorJob` from its options and prints the summary; a Python
caller builds the same record and gets the same summary. The job is checked when it is made
(:class:`~commlens.monitor.collect.CollectError`, exit 2): a collector that cannot start fails before it
binds a port or polls a rank.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from commlens.monitor.collect import (
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

__all__ = ["CollectorJob", "ModelSpec", "run_collector"]

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


def run_collector(
    job: CollectorJob,
    records: Sequence[CollectiveRecord] = (),
    *,
    note: Callable[[str], None] = log.info,
) -> JsonObject:
    """Run the collector ``job`` describes until its sources end (or ``duration_s``, or Ctrl-C) and return
    its summary (groups, sources, alerts: :meth:`Collector.summary`). ``records``: ones read before (NCCL
    Inspector output), fed first. ``note`` hears where the metrics are served and an interruption."""
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
    return collector.summary()


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
