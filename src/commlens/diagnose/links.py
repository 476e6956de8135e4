"""``diagnose links``: all-pairs bandwidth and latency, a ring check, slow hosts and slow links located.

As a worker under any launcher (one rank per host)::

    torchrun --nnodes 8 --nproc-per-node 1 ... -m commlens.diagnose.links --json links.json

Rank 0 prints the matrix and the faults and exits 1 when it found one. The stage's entry is :func:`run`: one
:class:`LinksConfig` (where the ranks run, the probe, the strategy) in, the :class:`LinkDiagnosis` out.
``run_links`` launches the ranks through bench's launcher (``commlens.bench.launcher.launch_ranks``: locally, or
one rank per host of an emulated cluster). The steps of the detection are in ``links_analysis.diagnose_links``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from commlens.bench.launcher import Local, OnCluster, Placement
from commlens.bench.lifetime import make_workdir
from commlens.bench.rendezvous import group_store
from commlens.diagnose.links_analysis import (
    LinkDiagnosis,
    LinkFault,
    LinkRecord,
    Thresholds,
    diagnose_links,
)
from commlens.diagnose.links_groups import GroupsError, diagnose_groups
from commlens.diagnose.links_measure import LinkProbe, measure, measure_groups
from commlens.diagnose.links_report import format_report, write_heatmap
from commlens.errors import CommlensError

__all__ = [
    "GroupsError",
    "LinkDiagnosis",
    "LinkFault",
    "LinkProbe",
    "LinksConfig",
    "LinksFailure",
    "Local",
    "OnCluster",
    "Thresholds",
    "STRATEGIES",
    "Strategy",
    "diagnose",
    "diagnose_groups",
    "diagnose_links",
    "format_report",
    "main",
    "run",
    "run_links",
    "write_heatmap",
]


@dataclass(frozen=True)
class Strategy:
    """How the ranks measure (every rank runs ``measure``; rank 0 gets the records) and how a verdict is drawn."""

    measure: Callable[[LinkProbe], list[LinkRecord] | None]
    analyse: Callable[[list[LinkRecord], int], LinkDiagnosis]
    min_hosts: int


STRATEGIES: dict[str, Strategy] = {
    "pairs": Strategy(measure, diagnose_links, 2),  # every pair, N-1 tournament rounds a pass
    "groups": Strategy(measure_groups, diagnose_groups, 4),  # rings over halves, ~log2(N) + 2 rounds a pass
}


def diagnose(records: list[LinkRecord], hosts: int, strategy: str = "pairs") -> LinkDiagnosis:
    """The verdict from a run's raw records, by the analysis of the strategy that measured them."""
    return STRATEGIES[strategy].analyse(records, hosts)


@dataclass(frozen=True)
class LinksConfig:
    """What one links diagnosis takes: where its ranks run, what each exchange sends, how it searches. Checked when
    built (:class:`GroupsError` naming the field)."""

    placement: Local | OnCluster  # Local(nproc), or OnCluster(name, ranks_per_host=1): one rank per emulated host
    probe: LinkProbe = LinkProbe()
    timeout_s: float = 120.0  # each rank gives up after this long in any exchange
    strategy: str = "pairs"  # pairs: every pair; groups: adaptive group tests (at least 4 hosts)

    def __post_init__(self) -> None:
        if not isinstance(self.placement, (Local, OnCluster)):
            raise GroupsError(f"placement: must be Local or OnCluster, got {type(self.placement).__name__}")
        if not isinstance(self.probe, LinkProbe):
            raise GroupsError(f"probe: must be a LinkProbe, got {type(self.probe).__name__}")
        timeout = self.timeout_s
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not (math.isfinite(timeout) and timeout > 0)
        ):
            raise GroupsError(f"timeout_s: must be a finite number of seconds > 0, got {timeout!r}")
        if self.strategy not in STRATEGIES:
            raise GroupsError(f"strategy: must be one of {', '.join(sorted(STRATEGIES))}, got {self.strategy!r}")


def run(config: LinksConfig) -> LinkDiagnosis:
    """The links stage: measure on the ranks ``config`` places (:func:`run_links`), then the verdict of its
    strategy's analysis (:func:`diagnose`). :class:`LinksFailure` when the measurement itself fails."""
    world, records = run_links(config.placement, config.probe, config.timeout_s, config.strategy)
    return diagnose(records, world, config.strategy)


def _check_hosts(strategy: str, hosts: int) -> None:
    need = STRATEGIES[strategy].min_hosts
    if hosts < need:
        raise GroupsError(f"--strategy {strategy} needs at least {need} hosts, got {hosts} (use --strategy pairs)")


class LinksFailure(CommlensError, RuntimeError):
    """The measurement itself failed (a rank died or timed out); ``exit_code`` 1, 130 when interrupted."""

    exit_code = 1

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.exit_code = code


def _probe_args(probe: LinkProbe) -> list[str]:
    return [
        "--size-bytes",
        str(probe.size_bytes),
        "--iters",
        str(probe.iters),
        "--warmup",
        str(probe.warmup),
        "--passes",
        str(probe.passes),
        "--latency-iters",
        str(probe.latency_iters),
    ] + ([] if probe.ring else ["--no-ring"])


def run_links(
    placement: Placement, probe: LinkProbe, timeout_s: float = 120.0, strategy: str = "pairs"
) -> tuple[int, list[LinkRecord]]:
    """Run the measurement's ranks through bench's launcher; (world size, rank 0's records).

    ``placement``: ``Local(nproc)``, or ``OnCluster(name, ranks_per_host=1)`` for one rank per emulated host.
    ``strategy``: ``pairs`` (all pairs) or ``groups`` (adaptive group tests, at least 4 hosts).
    Each rank gives up after ``timeout_s`` in any exchange; a rank that fails stops the others, and the
    failure names it with the last line it wrote to stderr.
    """
    from commlens.bench.launcher import RanksFailed, launch_ranks, place, rank_stderr

    ranks = place(placement)
    _check_hosts(strategy, ranks.world)
    workdir = make_workdir("commlens-links-")
    try:
        raw = workdir / "raw.json"
        args = [*_probe_args(probe), "--strategy", strategy, "--timeout", str(timeout_s), "--raw-out", str(raw)]
        try:
            interrupted = launch_ranks("commlens.diagnose.links", args, ranks, workdir, capture_stderr=True)
        except RanksFailed as e:
            failures = e.failures
            order = sorted(failures, key=lambda r: (getattr(failures[r], "timestamp", 0), r))
            # the first rank to fail that said why (a rank stopped by the agent may have written nothing)
            said = {r: rank_stderr(workdir, r).strip().splitlines() for r in order}
            first = next((r for r in order if said[r]), order[0])
            err = said[first]
            raise LinksFailure(f"rank {first} failed{': ' + err[-1] if err else ''}") from None
        if interrupted:
            raise LinksFailure("interrupted before the measurement finished", 130)
        return ranks.world, json.loads(raw.read_text())["records"]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _seconds(text: str) -> float:
    """``--timeout`` of a rank: a finite number of seconds > 0 (``nan`` would fail deep inside timedelta)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m commlens.diagnose.links",
        description="All-pairs bandwidth/latency (or adaptive group tests) and fault location; one rank per host.",
    )
    p.add_argument("--size-bytes", type=int, default=LinkProbe.size_bytes)
    p.add_argument("--iters", type=int, default=LinkProbe.iters)
    p.add_argument("--warmup", type=int, default=LinkProbe.warmup)
    p.add_argument("--passes", type=int, default=LinkProbe.passes)
    p.add_argument("--latency-iters", type=int, default=LinkProbe.latency_iters)
    p.add_argument("--no-ring", action="store_true")
    p.add_argument("--strategy", choices=sorted(STRATEGIES), default="pairs", help="all pairs, or adaptive group tests")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--timeout", type=_seconds, default=120.0, help="seconds before a rank gives up")
    p.add_argument("--json", dest="json_path", default=None, help="write the diagnosis as JSON ('-' for stdout)")
    p.add_argument("--heatmap", default=None, help="write the bandwidth heatmap PNG")
    p.add_argument("--raw-out", default=None, help="write rank 0's raw records here instead of a diagnosis")
    return p


def main(argv: list[str] | None = None) -> int:
    """One rank's entry point; rank 0 reports. Exit code 1 when a fault is found."""
    import torch.distributed as dist

    ns = _parser().parse_args(argv)
    probe = LinkProbe(
        size_bytes=ns.size_bytes,
        iters=ns.iters,
        warmup=ns.warmup,
        passes=ns.passes,
        latency_iters=ns.latency_iters,
        ring=not ns.no_ring,
    )
    bound = group_store(ns.timeout)  # rank 0 serves the store on MASTER_ADDR only, not every interface
    if bound is None:
        dist.init_process_group(ns.backend, timeout=dt.timedelta(seconds=ns.timeout))
    else:
        store, rank, world_size = bound
        dist.init_process_group(
            ns.backend, timeout=dt.timedelta(seconds=ns.timeout), store=store, rank=rank, world_size=world_size
        )
    try:
        world = dist.get_world_size()
        _check_hosts(ns.strategy, world)
        records = STRATEGIES[ns.strategy].measure(probe)
    finally:
        dist.destroy_process_group()
    if records is None:
        return 0
    if ns.raw_out:
        tmp = Path(ns.raw_out + ".tmp")
        tmp.write_text(json.dumps({"format": "commlens.links-raw/1", "records": records}))
        tmp.replace(ns.raw_out)
        return 0
    diagnosis = diagnose(records, world, ns.strategy)
    if ns.json_path == "-":
        print(json.dumps(diagnosis.to_dict(), indent=2))
    else:
        print(format_report(diagnosis))
        if ns.json_path:
            Path(ns.json_path).write_text(json.dumps(diagnosis.to_dict(), indent=2))
    if ns.heatmap:
        write_heatmap(diagnosis, Path(ns.heatmap))
    return 1 if diagnosis.faults else 0


if __name__ == "__main__":
    sys.exit(main())
