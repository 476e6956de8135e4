"""``commlens diagnose stragglers``: late and slow ranks from profiler traces or stored runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from commlens.cli.app import fail
from commlens.cli.diagnose_cmd import diagnose_app


@diagnose_app.command("stragglers")
def stragglers(
    traces: list[Path] = typer.Argument(None, help="PyTorch profiler (Kineto) Chrome-trace JSON files, one per rank."),
    run: str | None = typer.Option(None, "--run", help="A stored run id: use its per-rank samples."),
    db: str | None = typer.Option(None, "--db", help="Store URL or path (with --run)."),
    late_threshold_us: float = typer.Option(
        1000.0, "--late-threshold-us", help="Median lateness above which a rank is a late arriver (µs)."),
    slow_factor: float = typer.Option(
        1.5, "--slow-factor", help="A rank is slow within collectives when its median own time exceeds this "
                                   "factor times the median over ranks."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Find ranks that arrive late at collectives, or are slow within them.

    Exit 1 when a straggler is found, 0 when none, 2 on bad input.
    """
    from commlens.diagnose.stragglers import (
        StragglerError,
        StragglerParams,
        detect_stragglers,
        load_kineto_traces,
        load_run_samples,
    )
    from commlens.store import StoreError

    if bool(traces) == bool(run):
        fail("give either trace files or --run RUN_ID", 2)
    try:
        params = StragglerParams(late_threshold_s=late_threshold_us * 1e-6, slow_factor=slow_factor)
        table = load_kineto_traces(traces) if traces else load_run_samples(run, db)  # type: ignore[arg-type]
        report = detect_stragglers(table, params)
    except (StragglerError, StoreError, ValueError) as e:
        fail(str(e), 2)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print_stragglers(report)
    raise typer.Exit(1 if report.stragglers else 0)


def _print_stragglers(report) -> None:  # type: ignore[no-untyped-def]
    print(f"# {report.n_collectives} collectives over {len(report.ranks)} ranks ({report.source})")
    if not report.arrival_known:
        print("# per-rank durations only: lateness inferred from the shortest durations (ends assumed simultaneous)")
    elif not report.shared_clock:
        print("# ranks on several hosts: clock offsets removed assuming simultaneous collective ends")
    print(f"{'op':<18} {'rank':>5} {'offset(us)':>11} {'late p50(us)':>13} {'late p90(us)':>13} {'last%':>6} "
          f"{'own p50(us)':>12}  verdict")
    for row in report.ranks_table:
        def us(v: float | None) -> str:
            return "-" if v is None else f"{v * 1e6:.1f}"
        last = "-" if row["last_arrival_fraction"] is None else f"{row['last_arrival_fraction'] * 100:.0f}"
        print(f"{row['op']:<18} {row['rank']:>5} {us(row['clock_offset_s']):>11} {us(row['lateness_p50_s']):>13} "
              f"{us(row['lateness_p90_s']):>13} {last:>6} {us(row['own_time_p50_s']):>12}  "
              f"{', '.join(row['verdicts']) or 'ok'}")
    if report.stragglers:
        print(f"stragglers: {', '.join(f'rank {s.rank} ({s.kind}, {s.op})' for s in report.stragglers)}")
    else:
        print("no straggler")
