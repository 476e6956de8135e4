"""``commlens diagnose links``: all-pairs bandwidth/latency on an emulated cluster (or local ranks), faults located."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from commlens.cli.app import fail
from commlens.cli.diagnose_cmd import diagnose_app
from commlens.cli.numbers import checked
from commlens.cli.options import DB
from commlens.errors import CommlensError


@diagnose_app.command("links")
def links(
    cluster: str | None = typer.Option(None, "--cluster", help="emulated cluster (one rank per host)"),
    nproc: int | None = typer.Option(None, "--nproc", help="without --cluster: local ranks over loopback"),
    size: str = typer.Option("4M", "-b", "--size", help="bytes each way per exchange (K/M/G suffixes)"),
    iters: int = typer.Option(3, "-n", "--iters", help="timed exchanges per pair per pass"),
    passes: int = typer.Option(3, "--passes", help="times each round is measured; a fault must show in most"),
    strategy: str = typer.Option(
        "pairs",
        "--strategy",
        help="pairs: every pair, N-1 rounds a pass; groups: rings over halves, about log2(N)+2 rounds a pass",
    ),
    timeout: float = typer.Option(120.0, "--timeout", help="seconds before giving up"),
    as_json: bool = typer.Option(False, "--json", help="print the diagnosis as JSON"),
    heatmap: Path | None = typer.Option(None, "--heatmap", help="write the bandwidth heatmap PNG"),
    save: bool = typer.Option(False, "--save", help="also keep the diagnosis in the store (--db) for `commlens serve`"),
    db: str | None = DB,
) -> None:
    """Measure every pair in N-1 rounds of disjoint pairs plus a ring (or, with --strategy groups, rings over
    halves of the hosts, recursively); exit 1 when a slow host or link is found.

    Across real hosts, run the worker under torchrun: `torchrun ... -m commlens.diagnose.links`.
    """
    from commlens.cli.errors import errors_as_exit, fail_with
    from commlens.diagnose.links import (
        STRATEGIES,
        LinkProbe,
        LinksConfig,
        LinksFailure,
        Local,
        OnCluster,
        format_report,
        run,
        write_heatmap,
    )
    from commlens.results.units import parse_size

    checked(timeout, "--timeout", above=0)
    if strategy not in STRATEGIES:
        fail(f"--strategy must be one of {', '.join(sorted(STRATEGIES))}, got {strategy!r}", 2)
    with errors_as_exit():  # a size or probe setting that cannot be (SizeError, ProbeError)
        probe = LinkProbe(size_bytes=parse_size(size), iters=iters, passes=passes)
    if (cluster is None) == (nproc is None):
        fail(
            "give --cluster NAME (an emulated cluster) or --nproc N (local ranks); across real hosts run "
            "`torchrun ... -m commlens.diagnose.links`",
            2,
        )
    placement: Local | OnCluster
    if cluster is not None:
        from commlens.cluster import require_root

        with errors_as_exit():
            require_root()
        placement = OnCluster(cluster, ranks_per_host=1)
    else:
        if nproc is not None and nproc < 2:
            fail("--nproc must be >= 2", 2)
        placement = Local(nproc or 2)
    try:
        diagnosis = run(LinksConfig(placement, probe, timeout, strategy))
    except LinksFailure as e:
        fail_with(e, "measurement failed: ")
    except CommlensError as e:  # the placement (an unknown cluster): not a failed measurement
        fail_with(e)
    if as_json:
        print(json.dumps(diagnosis.to_dict(), indent=2))
    else:
        print(format_report(diagnosis))
    if heatmap:
        write_heatmap(diagnosis, heatmap)
    if save:
        from commlens.cli.reports_cmd import save_document

        save_document(db, "links", diagnosis.to_dict())
    raise typer.Exit(1 if diagnosis.faults else 0)
