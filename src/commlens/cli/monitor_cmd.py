"""``commlens monitor collect``: join a live job's ranks and name stragglers, slow groups and slowdowns."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import command_group, say
from commlens.cli.errors import errors_as_exit

if TYPE_CHECKING:
    from commlens.monitor.job import CollectorReport

monitor_app = command_group("monitor")


@monitor_app.command("collect")
def monitor_collect(
    endpoint: list[str] = typer.Option(
        [], "--endpoint", "-e", help="a rank's endpoint HOST:PORT, or HOST:FIRST-LAST for one per local rank"
    ),
    jsonl: Path | None = typer.Option(None, "--jsonl", help="a directory of the ranks' monitor-rank<R>.jsonl files"),
    inspector: Path | None = typer.Option(None, "--inspector", help="NCCL Inspector output (a file or directory)"),
    replay_files: bool = typer.Option(
        False, "--replay", help="files only: evaluate as the live collector would have, in the job's own time"
    ),
    interval: float = typer.Option(0.25, help="seconds between evaluations"),
    duration: float | None = typer.Option(None, help="stop after this many seconds (default: when the job ends)"),
    idle_exit: float = typer.Option(15.0, "--idle-exit", help="stop when no record came for this many seconds"),
    start_wait: float = typer.Option(
        60.0, "--start-wait", help="an error (exit 2) when no source answered within this many seconds"
    ),
    timeout: float = typer.Option(2.0, "--timeout", help="seconds one poll of a rank's endpoint may take, in all"),
    window_steps: int = typer.Option(
        10, "--window-steps", help="training steps of collectives the straggler method looks at"
    ),
    window: int = typer.Option(24, help="collectives it looks at when the job marks no steps"),
    persist: int = typer.Option(
        2, help="evaluations in a row before an alert is raised or cleared (stragglers: see the docs)"
    ),
    late_ms: float = typer.Option(5.0, "--late-ms", help="lateness that counts, in ms (at least)"),
    warmup_steps: int = typer.Option(
        10, "--warmup-steps", help="the job's first training steps, on which no straggler verdict rests (0: none)"
    ),
    min_change: float = typer.Option(0.3, "--min-change", help="slowdown: smallest relative slowdown"),
    below_expected: float = typer.Option(
        0.0, "--below-expected", help="alert when a group's busBW is below this fraction of the model's (0: off)"
    ),
    hang_after: float = typer.Option(
        60.0, "--hang-after", help="a collective in flight this long on some of its group's ranks is a hang (s)"
    ),
    topology: str | None = typer.Option(None, help="the model for --below-expected (a preset or topology file)"),
    backend: str = typer.Option("gloo", help="the job's backend, for the model (gloo, nccl)"),
    ranks_per_host: int = typer.Option(0, "--ranks-per-host", help="for the model: ranks per host (0: from the job)"),
    port: int | None = typer.Option(
        None, help="serve the collector's metrics on this port (127.0.0.1 unless --host; default: none)"
    ),
    host: str = typer.Option("127.0.0.1", help="address the collector's endpoint binds"),
    token: str | None = typer.Option(
        None, help="token for the ranks' endpoints and this one (default: $COMMLENS_MONITOR_TOKEN)"
    ),
    job_id: str = typer.Option("", "--job-id", help="the job_id label of the collector's metrics"),
    json_out: Path | None = typer.Option(
        None, "--output", "-o", help="also write the summary and every alert as JSON to this file"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON instead of text"),
    fail_on_alert: bool = typer.Option(False, "--fail-on-alert", help="exit 1 when any alert was raised"),
) -> None:
    """Read the ranks' records (endpoints, JSONL files or NCCL Inspector output), join them by group and
    sequence number, and raise alerts (log lines, and metrics when --port is given).

    Nothing is sent to the job: no collective, no barrier. Exit code 2 for unreadable sources.
    """
    from commlens.monitor.collect import CollectSettings
    from commlens.monitor.job import CollectorJob, ModelSpec, run_collector

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger("commlens.monitor").setLevel(logging.INFO)
    with errors_as_exit():
        job = CollectorJob(
            endpoints=tuple(endpoint),
            jsonl=jsonl,
            has_records=inspector is not None,
            replay=replay_files,
            settings=CollectSettings(
                window=window,
                window_steps=window_steps,
                persist=persist,
                late_threshold_s=late_ms / 1e3,
                warmup_steps=warmup_steps,
                min_change=min_change,
                below_expected=below_expected,
                hang_after_s=hang_after,
            ),
            model=None if topology is None else ModelSpec(topology, backend, ranks_per_host),
            interval_s=interval,
            duration_s=duration,
            idle_exit_s=idle_exit,
            start_wait_s=start_wait,
            poll_timeout_s=timeout,
            token=token or os.environ.get("COMMLENS_MONITOR_TOKEN") or None,
            metrics_port=port,
            metrics_host=host,
            job_id=job_id,
        )
        records = []
        if inspector is not None:
            from commlens.ingest.nccl_inspector import records_from_inspector

            records = records_from_inspector(inspector)
        report = run_collector(job, records, note=lambda text: say("", text))
    if json_out is not None:
        from commlens.files import atomic_text

        with atomic_text(json_out) as fp:
            json.dump(report.as_dict(), fp, indent=2)
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        _print_summary(report)
    raise typer.Exit(1 if fail_on_alert and report.alerts else 0)


def _print_summary(report: CollectorReport) -> None:
    """The report as text: groups, sources that failed, alerts."""
    for g in report.groups:
        print(
            f"group {g.name}: {g.joined} collectives joined across ranks {_ranks(list(g.ranks))}, last step {g.last_step}"
        )
    for src in report.sources:
        if src.state != "ok" or src.bad_records:
            bad = f", {src.bad_records} invalid records skipped" if src.bad_records else ""
            failed = f" ({src.failures} failed polls)" if src.failures else ""
            print(f"{src.kind} {src.source}: {src.state}{failed}: {src.problem or 'answering'}{bad}")
    if not report.alerts:
        failing = sum(1 for src in report.sources if src.state != "ok")
        print("no alert" + (f" (over the sources that answered; {failing} did not)" if failing else ""))
    for alert in report.alerts:
        state = "active" if alert.cleared_at_s is None else "cleared"
        print(f"{alert.kind}: {alert.text} [{state}]")


def _ranks(ranks: list[int]) -> str:
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks[:16])) + ("..." if len(ranks) > 16 else "")
