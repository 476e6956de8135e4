"""``commlens bench``: parse nccl-tests' options, run ``commlens.bench.run``, print the table, store the run.

The run itself (ranks, events, failures) is the library's; this module owns the terminal (the table as
rows finish, a progress bar on a terminal), the outputs (``--json``, ``--nccl-tests-json``, the result
store, checked before any rank starts) and the exit code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from commlens.bench.config import ConfigError, build_parser, check_backend_here, command_line, config_from_args
from commlens.bench.events import Event, Finished, Progress
from commlens.bench.finalize import TablePrinter
from commlens.bench.launcher import BenchFailure, Local, OnCluster, Placement
from commlens.cli.bench_outputs import Destinations, SaveError, check_destinations, exit_code, save_outputs
from commlens.results.records import Run

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["Terminal", "launch", "say", "store"]


def launch(argv: Sequence[str], *, print_table: bool = True) -> int:
    """Run ``commlens bench ARGV``: options -> :class:`BenchConfig` -> :func:`commlens.bench.run` -> the table, the
    outputs; returns the exit code. Raises ConfigError (exit 2) and BenchFailure."""
    from commlens import bench
    from commlens.bench import launcher

    argv = list(argv)
    ns = build_parser().parse_args(argv)
    if ns.algo.strip().lower() == "list":
        from commlens.bench.algorithms import algo_listing

        print("\n".join(algo_listing()))
        return 0
    if ns.fail_below is not None and not 0 <= ns.fail_below < 100:
        raise ConfigError(f"--fail-below {ns.fail_below:g}: expected a percentage from 0 to 100")
    cfg = config_from_args(ns, check_backend=False)
    placement: Placement = OnCluster(ns.cluster, ns.ranks_per_host) if ns.cluster is not None else Local(ns.nproc)
    to = Destinations.of(ns)
    # stdout carries one JSON document (--json, or --json - / --nccl-tests-json -): no table around it
    print_table = print_table and "-" not in (to.json_path, to.nccl_json_path)
    check_destinations(to)  # before anything imports torch (seconds): a bad --json or --db is refused at once
    check_backend_here(cfg)
    launcher.check(cfg, placement)
    with Terminal(print_table=print_table, quiet=ns.quiet) as terminal:
        run = bench.run(cfg, placement=placement, on_event=terminal.on_event)
    run = dataclasses.replace(run, command_line=command_line(["commlens", "bench", *argv]))
    from commlens.cli.expect_cmd import below_by_more_than, judge_or_none, summary_lines, with_kept_verdict

    verdict = judge_or_none(run)  # kept with the stored run: `show` prints it without judging again
    run = with_kept_verdict(run, verdict)
    store(run, to)
    # the expected-performance verdict under the table (commlens expect RUN for the details)
    if print_table and verdict is not None:
        print("\n".join(summary_lines(verdict)))
    code = exit_code(run, terminal.wrong, say)
    if code == 0 and verdict is not None and below_by_more_than(verdict.status, verdict.pct, ns.fail_below):
        say(f"error: run {run.run_id[:12]} is below expectation by {verdict.pct:.0f}% (more than {ns.fail_below:g}%)")
        return 1
    return code


def say(text: str) -> None:
    """A message on stderr (stored-run notes, wrong results)."""
    from rich.console import Console

    Console(stderr=True, highlight=False, soft_wrap=True).print(text, markup=False)


def store(run: Run, to: Destinations) -> None:
    """Write the run where ``to`` says; BenchFailure (exit 1) naming the file that kept it when a write failed."""
    try:
        save_outputs(run, to, say)
    except SaveError as e:
        raise BenchFailure(str(e), 1) from None


class Terminal:
    """What a running sweep shows: the nccl-tests table as rows finish (``print_table``) and, on a terminal
    unless ``quiet``, a progress bar; collects the wrong-result messages of the end event."""

    def __init__(self, *, print_table: bool = True, quiet: bool = False):
        from rich.console import Console

        console = Console(highlight=False, soft_wrap=True)
        self.printer = TablePrinter(
            (lambda line: console.print(line, markup=False, highlight=False)) if print_table else (lambda line: None)
        )
        self.progress = _ProgressBar(console) if not quiet and console.is_terminal else None
        self.wrong: list[str] = []

    def on_event(self, event: Event) -> None:
        if isinstance(event, Progress):
            if self.progress is not None:
                self.progress.update(event)
            return
        if isinstance(event, Finished):
            self.wrong.extend(event.wrong)
            if self.progress is not None:
                self.progress.finish()
        self.printer.handle(event)

    def __enter__(self) -> Terminal:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


class _ProgressBar:
    """The progress bar of a terminal: the row being timed, rows done of all."""

    def __init__(self, console: Console) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task = self._bar.add_task("starting ranks", total=None)

    def start(self) -> None:
        self._bar.start()

    def stop(self) -> None:
        self._bar.stop()

    def update(self, event: Progress) -> None:
        desc = f"{event.op} {event.dtype} {event.size_bytes} B"
        self._bar.update(self._task, total=event.total, completed=event.index, description=desc)

    def finish(self) -> None:
        self._bar.update(self._task, completed=self._bar.tasks[0].total or 0)
