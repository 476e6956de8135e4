"""``commlens replay plan|run|report``: a job's communication extracted, replayed on real ranks, compared."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import command_group, fail, say
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB

if TYPE_CHECKING:
    from commlens.bench.launcher import Placement
    from commlens.replay.compare import ReplayComparison, ReplayReport
    from commlens.replay.plan import ReplayPlan

replay_app = command_group("replay")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def _size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n}B"


def plan_summary(plan: ReplayPlan) -> list[str]:
    """What was extracted, as ``replay plan`` prints it."""
    from collections import Counter

    ops = Counter(c.op for r in plan.ranks for c in r.calls)
    lines = [
        f"{plan.source}: {len(plan.ranks)} of {plan.world_size} ranks, {plan.n_calls} calls "
        f"({', '.join(f'{op} {n}' for op, n in ops.most_common())}), recorded on {plan.backend or 'an unnamed backend'}",
        f"timing: {plan.timing or 'as the source recorded it'}",
        "groups: "
        + "; ".join(f"{g.name} ({len(g.ranks)} ranks)" for g in plan.groups[:12])
        + (f"; ... {len(plan.groups) - 12} more" if len(plan.groups) > 12 else ""),
    ]
    lines += [f"note: {n}" for n in plan.notes]
    return lines


@replay_app.command("plan")
def plan_cmd(
    files: list[Path] = typer.Argument(
        ..., help="traces, monitor-rank<R>.jsonl files, Inspector dumps, or their directories"
    ),
    output: Path | None = typer.Option(None, "-o", "--output", help="the plan file to write (JSON; '-' for stdout)"),
    source: str | None = typer.Option(
        None, "--source", help="kineto, monitor, inspector or chakra (default: sniffed from each file)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the plan on stdout (the same as -o -)"),
) -> None:
    """Extract a job's communication into a replay plan: per rank, its calls in order, with their timing."""
    from commlens.replay import extract_plan, write_plan

    if as_json and output is not None and str(output) != "-":
        fail(f"--json prints the plan on stdout and -o {output} writes it to a file: give one")
    if as_json:
        output = Path("-")
    if output is None:
        fail("give -o FILE (where the plan goes) or --json (on stdout)")
    if source is not None and source not in ("kineto", "monitor", "inspector", "chakra"):
        fail(f"--source must be kineto, monitor, inspector or chakra, got {source!r}")
    with errors_as_exit():
        plan = extract_plan(files, source)
    try:
        write_plan(plan, output)
    except OSError as e:
        fail(f"{output}: cannot write the plan ({e.strerror or e})")
    for line in plan_summary(plan):
        say("", line)
    if str(output) != "-":
        say("", f"wrote {output}")


def comparison_lines(cmp: ReplayComparison) -> list[str]:
    lines = [
        f"{'group':<10} {'ranks':>5} {'calls':>6} {'recorded µs':>13} {'replayed µs':>13} {'ratio':>7} {'median':>7}"
    ]
    for g in cmp.groups:
        lines.append(
            f"{g.group[:10]:<10} {g.size:>5} {g.calls:>6} {_us(g.recorded_s):>13} {_us(g.replayed_s):>13} "
            f"{g.ratio:>7.3f} {g.median_ratio:>7.3f}"
        )
    lines.append(
        f"{'total':<10} {'':>5} {len(cmp.collectives):>6} {_us(cmp.recorded_total_s):>13} "
        f"{_us(cmp.replayed_total_s):>13} {cmp.total_ratio:>7.3f} {cmp.median_ratio:>7.3f}"
    )
    lines.append(
        f"as the earliest rank saw them (waits for late peers included): recorded {_us(cmp.recorded_max_total_s)} µs, "
        f"replayed {_us(cmp.replayed_max_total_s)} µs"
    )
    if cmp.last_arrival:
        rec, rep = cmp.last_arrival_totals()
        lines.append(
            f"from the last entry to the last exit (one clock; {len(cmp.last_arrival)} collectives): recorded "
            f"{_us(rec)} µs, replayed {_us(rep)} µs" + (f", ratio {rep / rec:.3f}" if rec > 0 else "")
        )
    lines.append(
        f"communication on the critical path (busiest rank): recorded {_us(cmp.recorded_critical_comm_s)} µs, "
        f"replayed {_us(cmp.replayed_critical_comm_s)} µs"
    )
    span = "step time (first call to last end)" if cmp.gaps else "span (no gaps: communication alone)"
    ratio = f" (ratio {cmp.span_ratio:.3f})" if cmp.gaps and math.isfinite(cmp.span_ratio) else ""
    lines.append(f"{span}: recorded {_us(cmp.recorded_span_s)} µs, replayed {_us(cmp.replayed_span_s)} µs{ratio}")
    if cmp.overlap_known:
        iso = cmp.isolated
        lines.append(
            f"isolated collectives (recorded without compute alongside on their host, what a back-to-back replay "
            f"compares with): {len(iso)} of {cmp.overlap_known}"
            + (
                f", recorded {_us(sum(c.recorded_s for c in iso))} µs, replayed {_us(sum(c.replayed_s for c in iso))}"
                f" µs, ratio {cmp.isolated_ratio:.3f}, median {cmp.isolated_median_ratio:.3f}"
                if iso
                else ""
            )
        )
    worst = cmp.worst()
    if worst:
        lines.append("worst calls (ratio farthest from 1):")
        for c in worst:
            where = f"rank {c.rank} " if c.rank is not None else ""
            lines.append(
                f"  {where}group {c.group} #{c.index} {c.op} {_size(c.size_bytes)} {c.dtype}: recorded "
                f"{_us(c.recorded_s)} µs, replayed {_us(c.replayed_s)} µs, ratio {c.ratio:.3f}"
            )
    lines += [f"note: {n}" for n in cmp.notes]
    return lines


def _finish(
    report: ReplayReport, as_json: bool, db: str | None, store: bool, tag: str | None, json_path: str | None
) -> None:
    """Print the report (the comparison, or its JSON), then store its run where the options say."""
    from commlens.cli.bench_outputs import Destinations, SaveError, save_outputs

    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        for line in comparison_lines(report.comparison):
            print(line)
    try:
        save_outputs(report.run, Destinations(json_path=json_path, db=db, store=store, tag=tag), lambda m: say("", m))
    except SaveError as e:
        fail(str(e), 1)


@replay_app.command("run")
def run_cmd(
    plan_file: Path = typer.Argument(..., help="a plan written by `commlens replay plan`"),
    nproc: int | None = typer.Option(None, "--nproc", help="ranks on this host (default: the plan's ranks)"),
    cluster: str | None = typer.Option(None, "--cluster", help="run on the emulated cluster NAME (needs root)"),
    ranks_per_host: int | None = typer.Option(None, "--ranks-per-host"),
    backend: str = typer.Option("gloo", "--backend", help="the backend to replay on (change one thing)"),
    algo: str = typer.Option(
        "builtin", "--algo", help="a commlens algorithm instead of the backend's (see bench --algo list)"
    ),
    no_gaps: bool = typer.Option(False, "--no-gaps", help="back to back: communication alone, no recorded gaps"),
    compute: str | None = typer.Option(
        None,
        "--compute",
        help="the gaps' stand-in: spin (computes, holds a core) or sleep (default: spin; sleep with --timeline)",
    ),
    timeline: bool = typer.Option(
        False,
        "--timeline",
        help="issue each call at its recorded time, without waiting for the ones before it (the default for a plan "
        "whose calls overlap on a rank)",
    ),
    blocking: bool = typer.Option(
        False, "--blocking", help="each call waited for before the next, with the recorded gaps (the default otherwise)"
    ),
    scale_sizes: float = typer.Option(1.0, "--scale-sizes", help="every message's size times K"),
    group: str | None = typer.Option(None, "--group", help="replay only this process group's calls, on its ranks"),
    map_ranks: int | None = typer.Option(None, "--map-ranks", help="map the job onto its first N ranks"),
    passes: int = typer.Option(1, "--passes", help="measured passes over the plan"),
    warmup_passes: int = typer.Option(1, "--warmup-passes"),
    timeout: float = typer.Option(300.0, "--timeout", help="seconds a call or the start-up may take"),
    db: str | None = DB,
    no_store: bool = typer.Option(False, "--no-store", help="do not store the run"),
    tag: str | None = typer.Option(None, "--tag"),
    json_path: str | None = typer.Option(None, "--save-json", help="also write the run (commlens JSON) here"),
    as_json: bool = typer.Option(False, "--json", help="print the comparison as JSON"),
) -> None:
    """Replay a plan on real ranks; compare each collective with its recording; store a run of source replay."""
    from commlens.bench.config import ConfigError, backend_problem
    from commlens.bench.launcher import Local, OnCluster
    from commlens.cli.bench_outputs import Destinations, check_destinations
    from commlens.replay import ReplayRequest, ReplaySettings, load_plan, run
    from commlens.replay.plan import check_runnable
    from commlens.replay.transform import first_ranks, select_group

    if group is not None and map_ranks is not None:
        fail("--group and --map-ranks are two ways to scale down: give one")
    if nproc is not None and cluster is not None:
        fail("--nproc and --cluster are two placements: give one")
    if sum((no_gaps, timeline, blocking)) > 1:
        fail("--no-gaps, --timeline and --blocking are three modes: give one")
    with errors_as_exit():
        plan = load_plan(plan_file)
        if group is not None:
            plan = select_group(plan, group)
        if map_ranks is not None:
            plan = first_ranks(plan, map_ranks)
        check_runnable(plan)
        timeline = timeline or (not no_gaps and not blocking and _overlapping(plan))
        settings = ReplaySettings(
            backend=backend,
            device="cuda" if backend == "nccl" else "cpu",
            algo=algo,
            gaps=not no_gaps,
            compute=compute or ("sleep" if timeline else "spin"),
            timeline=timeline,
            size_scale=scale_sizes,
            passes=passes,
            warmup_passes=warmup_passes,
            timeout_s=timeout,
        )
        problem = backend_problem(backend, settings.device)
        if problem is not None:
            fail(problem)
        if algo != "builtin":
            from commlens.replay.worker import algo_for

            ops = sorted({c.op for r in plan.ranks for c in r.calls})
            if all(algo_for(algo, op) == "builtin" for op in ops):
                fail(f"--algo {algo}: commlens has no such algorithm for any op of the plan ({', '.join(ops)})")
        placement: Placement = OnCluster(cluster, ranks_per_host) if cluster else Local(nproc or plan.world_size)
        if nproc is not None and nproc != plan.world_size:
            fail(
                f"--nproc {nproc}: the plan has {plan.world_size} ranks; scale it down with --group NAME or "
                f"--map-ranks {nproc}"
            )
        try:
            check_destinations(Destinations(json_path=json_path, db=db, store=not no_store, tag=tag))
        except ConfigError as e:
            fail(str(e))
        import shlex
        import sys

        command = "commlens replay " + shlex.join(sys.argv[2:])
        report = run(ReplayRequest(plan, placement, settings, command_line=command, tag=tag))
        _finish(report, as_json, db, not no_store, tag, json_path)


def _overlapping(plan: ReplayPlan) -> bool:
    """Whether the plan's calls overlap on a rank (an async job), said on stderr: then the default mode is the
    timeline, the one mode that keeps that overlap."""
    from commlens.replay.plan import overlapping_calls

    n = overlapping_calls(plan)
    if n:
        say(
            "note",
            f"{n} of the plan's {plan.n_calls} calls were issued before an earlier call on their rank had "
            "ended (async): replayed on the recorded timeline (--timeline); --blocking waits for each call",
        )
    return n > 0


@replay_app.command("report")
def report_cmd(
    plan_file: Path = typer.Argument(..., help="the plan the ranks replayed"),
    times_file: Path = typer.Argument(..., help="the --out file of `torchrun ... -m commlens.replay.worker`"),
    db: str | None = DB,
    no_store: bool = typer.Option(False, "--no-store"),
    tag: str | None = typer.Option(None, "--tag"),
    json_path: str | None = typer.Option(None, "--save-json"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Compare and store a replay that an external launcher (torchrun, srun) ran."""
    from commlens.replay import load_plan, report_times
    from commlens.replay.runner import load_times

    with errors_as_exit():
        plan = load_plan(plan_file)
        report = report_times(plan, load_times(times_file, plan), tag=tag)
        _finish(report, as_json, db, not no_store, tag, json_path)
