"""``commlens project WORKLOAD``, ``project sweep``, ``project validate``, ``project calibrate``.

Exit codes: 0 done; 2 bad input or a layout that cannot run (the reason on
stderr); 1 when ``validate`` misses its targets (every row within 8%, mean
absolute error <= 4%). ``--accelerators FILE`` (default: the files in
``$COMMLENS_ACCELERATORS``) overrides or adds accelerator figures, e.g. those
``project calibrate`` fitted; a bad file exits 2 naming the file and field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

from commlens.cli.app import command_group, fail
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB, option_set

if TYPE_CHECKING:  # typer vendors click; TyperGroup's hooks take its Context, of which typer.Context is a subclass
    from typer._click import Context as ClickContext

    from commlens.project import Projection
    from commlens.project.abevidence import Evidence
    from commlens.project.sweep import Base, Overrides, SweepRow
    from commlens.project.validation_report import MemoryStats, TableStats, ValidationSummary
    from commlens.sim import SimOptions


@dataclass(frozen=True)
class _NetworkOptions:
    """The network options of ``project`` and ``project sweep``: the analytic cost models, or the simulator."""

    network: str = typer.Option(
        "analytic", "--network", help="analytic (cost models) or sim (commlens sim: every group at once)"
    )
    routing: str = typer.Option("ecmp", "--routing", help="with --network sim: ecmp or spray")
    seed: int = typer.Option(0, "--seed", help="with --network sim: the ECMP hash seed")
    qps: int = typer.Option(1, "--qps", help="with --network sim: connections each flow is split over")
    fail_links: list[str] | None = typer.Option(
        None, "--fail", help="with --network sim: fail a switch, NIC or link (pattern)"
    )
    degrade: list[str] | None = typer.Option(None, "--degrade", help="with --network sim: NAME:FACTOR, capacity kept")

    def sim_options(self) -> SimOptions | None:
        """The simulator's options of ``--network sim``, None for analytic (exit 2 when they do not go together)."""
        from commlens.cli.sim_cmd import sim_options

        if self.network not in ("analytic", "sim"):
            fail(f"--network: {self.network!r} is not a network model; known: analytic, sim")
        if self.network == "analytic":
            given = [n for n, v in (("--fail", self.fail_links), ("--degrade", self.degrade)) if v]
            if given or self.routing != "ecmp" or self.seed or self.qps != 1:
                fail(f"{', '.join(given) or '--routing/--seed/--qps'}: only with --network sim")
            return None
        return sim_options(self.routing, self.seed, self.qps, 2, self.fail_links or (), self.degrade or ())


_ACCELERATORS_HELP = "accelerators YAML over the shipped figures (default: $COMMLENS_ACCELERATORS)"
_ONE = "one"  # the projection of one point: ``commlens project WORKLOAD ...``, with no sub-command name


class _ProjectGroup(TyperGroup):
    """``project WORKLOAD ...`` projects one point; ``project sweep|validate|calibrate ...`` are sub-commands.

    A first argument that names no sub-command (a workload, an option, nothing) goes to the projection, the
    hidden sub-command ``one``: a click group cannot take a positional argument beside its sub-commands, so
    this one hook names the default sub-command."""

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands or args[0] == _ONE:  # (a workload named "one" stays one)
            args = [_ONE, *args]
        return super().parse_args(ctx, args)


class _UnnamedContext(typer.Context):
    """The projection's context: its usage line reads ``commlens project [OPTIONS] WORKLOAD``, without ``one``."""

    @property
    def command_path(self) -> str:
        return super().command_path.removesuffix(f" {_ONE}")


class _UnnamedCommand(TyperCommand):
    context_class = _UnnamedContext


project_app = command_group("project", no_args_is_help=False, cls=_ProjectGroup)


@project_app.command(_ONE, hidden=True, cls=_UnnamedCommand)
@option_set("net", _NetworkOptions)
def _one(
    workload: str = typer.Argument(..., help="workload preset (llama3-70b, ...) or YAML file"),
    topology: str = typer.Option(..., "--topology", "-t", help="topology preset or YAML file"),
    gpus: int = typer.Option(..., "--gpus", "-n", help="GPUs in the job"),
    tp: int = typer.Option(1, "--tp"),
    pp: int = typer.Option(1, "--pp"),
    cp: int = typer.Option(1, "--cp"),
    vpp: int = typer.Option(1, "--vpp", help="virtual stages per GPU (interleaved 1F1B)"),
    ep: int = typer.Option(1, "--ep"),
    zero: int = typer.Option(1, "--zero", help="ZeRO stage 0-3 (3 = FSDP)"),
    fsdp: bool = typer.Option(False, "--fsdp", help="same as --zero 3"),
    recompute: str = typer.Option("selective", "--recompute", help="none, selective or full"),
    sp: bool = typer.Option(True, "--sp/--no-sp", help="sequence parallelism with TP"),
    flash: bool = typer.Option(True, "--flash/--unfused-attention"),
    overlap: bool = typer.Option(True, "--overlap/--no-overlap", help="overlap DP communication with compute"),
    order: str = typer.Option("tp,cp,dp,pp", "--order", help="placement, innermost first"),
    framework_name: str = typer.Option(
        "megatron-core",
        "--framework",
        help="training stack: megatron-core, nemo, torchtitan, deepspeed, llm-foundry, olmo-core, fms-fsdp,"
        " automodel, or a release of one (nemo-25.04, megatron-core-25.11, torchtitan-2024, ...;"
        " frameworks.yaml lists them)",
    ),
    schedule: str | None = typer.Option(
        None, "--schedule", help="pipeline schedule: 1f1b, interleaved, zero-bubble, dualpipe, gpipe"
    ),
    seq_len: int | None = typer.Option(None, "--seq-len"),
    global_batch: int | None = typer.Option(None, "--global-batch"),
    micro_batch: int | None = typer.Option(None, "--micro-batch"),
    precision: str | None = typer.Option(None, "--precision", help="bf16 or fp8"),
    sets: list[str] = typer.Option([], "--set", help="any field: workload.PATH=V, layout.FIELD=V, topology.PATH=V"),
    accelerators: str | None = typer.Option(None, "--accelerators", help=_ACCELERATORS_HELP),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    save: bool = typer.Option(False, "--save", help="also keep the result in the store (--db) for `commlens serve`"),
    db: str | None = DB,
    no_what_if: bool = typer.Option(False, "--no-what-if", help="skip the single changes that would help most"),
    *,
    net: _NetworkOptions,
) -> None:
    """Project one training step of WORKLOAD on GPUS GPUs of TOPOLOGY under the given layout, and the single
    changes (layout, batch, precision, NICs, scale-up domain) that would shorten it most."""
    from commlens.project.sweep import Base, parse_vary

    files = accelerators_in_force(accelerators)

    layout: Overrides = {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "vpp": vpp,
        "ep": ep,
        "zero": 3 if fsdp else zero,
        "recompute": recompute,
        "sp": sp,
        "flash_attention": flash,
        "overlap_grad_reduce": overlap,
        "overlap_param_gather": overlap,
        "order": order,
        "framework": framework_name,
        **({"schedule": schedule} if schedule else {}),
    }
    wl = {
        k: v
        for k, v in (
            ("seq_len", seq_len),
            ("global_batch", global_batch),
            ("micro_batch", micro_batch),
            ("precision", precision),
        )
        if v is not None
    }
    point = _point(sets, parse_vary)
    base = Base(workload, topology, gpus, layout, wl, files, net.sim_options())
    p = _project(base, point)
    what = None
    if net.network == "sim" and not no_what_if and not as_json:
        print("what-if: not explored with --network sim (each change is a simulation; use project sweep --network sim)")
    if not no_what_if and net.network != "sim":
        from commlens.project.whatif import explore

        with errors_as_exit():
            what = explore(base, point, current=p)
    document = {**p.as_dict(), **({"what_if": what.as_dict()} if what else {})}
    if save:  # the same document --json prints
        from commlens.cli.reports_cmd import save_document

        save_document(db, "projection", document)
    if as_json:
        print(json.dumps(document, indent=1))
        return
    _print_projection(p)
    if what is not None:
        _print_what_if(what)


def accelerators_in_force(path: str | None) -> tuple[str, ...]:
    """``--accelerators FILE`` (else ``$COMMLENS_ACCELERATORS``): the files, checked now (exit 2 naming the file
    and field), to pass down to the projection."""
    from commlens.project.hardware import accelerator_files, active_devices

    with errors_as_exit():
        files = accelerator_files(path)
        if files:
            active_devices(files if path is not None else None)  # (None: errors say the files came from $...)
    return files


def _point(sets: list[str], parse_vary) -> Overrides:
    with errors_as_exit("--set "):
        parsed = parse_vary(sets)
    for k, v in parsed.items():
        if len(v) > 1:  # a comma makes --vary's list: one point takes one value (a list field's items join with '-')
            fail(
                f"--set {k} takes one value, got {len(v)} ({', '.join(map(str, v))}); a list field's items join with "
                "'-' (layout.cuda_graph_scope=attn-moe_router); several points: commlens project sweep --vary"
            )
    return {k: v[0] for k, v in parsed.items()}


def _project(base: Base, point: Overrides) -> Projection:
    """The point's scenario (``sweep.point_scenario``, built once here) run by the projection stage, or exit 2
    with the reason."""
    from commlens.project import run
    from commlens.project.sweep import point_scenario

    with errors_as_exit():  # the projection's (a layout field's included), the workload's and the topology's
        return run(point_scenario(base, point))


def _recompute_count(lay: dict) -> str:
    """`` (block, 12 layers per chunk)`` where full recomputation names a layer count, else nothing."""
    if lay.get("recompute_layers") is None:
        return ""
    return f" ({lay['recompute_method']}, {lay['recompute_layers']} layers per chunk)"


def _print_projection(p) -> None:
    from commlens.cli.tables import new_table, print_table, right
    from commlens.project.memory import MEMORY_TOLERANCE
    from commlens.results.units import format_percent

    lay = p.layout
    optimizer = (lay.get("settings") or {}).get("optimizer")  # named where it is not Adam [27 s26 muon]
    print(
        f"{p.workload} on {p.gpus} x {p.topology}: TP {lay['tp']}{' +SP' if lay['sp'] else ''}, CP {lay['cp']}, "
        f"PP {lay['pp']} (vpp {lay['vpp']}), DP {lay['dp']}, EP {lay['ep']}, ZeRO {lay['zero']}, "
        f"recompute {lay['recompute']}{_recompute_count(lay)}, {lay['micro_batches']} micro-batches"
        + (f", optimizer {optimizer}" if optimizer else "")
    )
    print(f"  step time        {p.step_time_s:10.3f} s")
    if p.band:
        b = p.band
        print(
            f"  80% band        {b['low_s']:.3f}-{b['high_s']:.3f} s  (validation residuals of {b['family']}, "
            f"{b['rows']} published rows)"
        )
    else:
        print("  80% band         none: no published rows near this workload")
    print(f"  framework        {p.framework:>10}")
    print(f"  tokens/s         {p.tokens_per_s:10.4g}")
    print(f"  model TFLOP/s    {p.model_tflops_per_gpu:10.1f} per GPU   (MFU {format_percent(p.mfu)})")
    print(f"  hw TFLOP/s       {p.hw_tflops_per_gpu:10.1f} per GPU   (with recomputation)")
    kinds = ("weights", "gradients", "optimizer", "activations")
    stage = f" (stage {int(p.memory['stage']) + 1})" if lay["pp"] > 1 and "stage" in p.memory else ""
    print(
        f"  memory           {p.memory_bytes_per_gpu / 1e9:10.1f} GB per GPU{stage} of "
        f"{p.memory_capacity_bytes / 1e9:.1f}: allocated {p.memory['total'] / 1e9:.1f} ("
        + ", ".join(f"{k} {p.memory[k] / 1e9:.1f}" for k in kinds if k in p.memory)
        + "), + allocator fragmentation and runtime"
        + (
            f"\n                   tight: over capacity by less than the memory model's error "
            f"({MEMORY_TOLERANCE:.0%}); it may not fit"
            if p.memory_fit == "tight"
            else ""
        )
    )
    if lay["pp"] > 1 and p.stages:
        _print_stages(p)
    if p.kernels:
        total = sum(p.kernels.values())
        print(
            "  kernels (share of GPU kernel time): "
            + ", ".join(f"{k} {format_percent(v / total)}" for k, v in p.kernels.items() if v / total >= 0.005)
        )
    print("  breakdown (s, share of step):")
    parts = [(k, f"{v:.3f}", format_percent(v / p.step_time_s)) for k, v in p.breakdown.items() if v > 0]
    print_table(new_table("part", right("time s"), right("share"), rows=parts), indent=4)
    hidden = {k: v for k, v in p.overlapped_s.items() if v > 0}
    if hidden:
        print("  overlapped (hidden): " + ", ".join(f"{k} {v:.3f} s" for k, v in hidden.items()))


def _print_stages(p) -> None:
    """One row per run of identical pipeline stages: layers, time per micro-batch, its own idle time (bubble and
    waiting for the pace-setter), micro-batches in flight, memory."""
    from commlens.cli.tables import new_table, print_table, right

    print(f"  pipeline stages (stage {p.pace_stage + 1} sets the pace):")
    table = new_table(*map(right, ("stage", "layers", "ms / micro-batch", "idle s", "in flight", "memory GB")))
    rows: list[list[Any]] = []
    for i, st in enumerate(p.stages):
        key = (st["layers"], round(st["per_micro_batch_s"], 9), st["in_flight"], round(st["reserved_bytes"]))
        if rows and rows[-1][0] == key and i != p.pace_stage and rows[-1][2] != p.pace_stage:
            rows[-1][2] = i
            continue
        rows.append([key, i, i, st])
    for _key, first, last, st in rows:
        name = str(first + 1) if first == last else f"{first + 1}-{last + 1}"
        table.add_row(
            name,
            f"{st['layers']:.0f}",
            f"{st['per_micro_batch_s'] * 1e3:.2f}",
            f"{st['idle_s']:.3f}",
            f"{st['in_flight']:.3g}",
            f"{st['reserved_bytes'] / 1e9:.1f}",
        )
    print_table(table, indent=4)


def _print_what_if(what) -> None:
    """The best single changes (``whatif.explore``) as a table, then why the most telling refused ones cannot run."""
    from commlens.cli.tables import new_table, print_table, right
    from commlens.project.whatif import MIN_GAIN
    from commlens.results.units import format_percent

    print("what would help most (projected by this model):")
    if what.changes:
        with_ab = any(c.evidence is not None for c in what.changes)
        rows = [
            (
                c.label,
                f"{c.step_time_s:.3f}",
                format_percent(c.gain, sign=True),
                format_percent(c.mfu),
                f"{c.memory_bytes_per_gpu / 1e9:.1f}",
                *([_ab_cell(c.evidence)] if with_ab else []),
            )
            for c in what.changes
        ]
        heads = ("step s", "gain", "MFU", "mem GB", *(["model vs A/B"] if with_ab else []))
        print_table(new_table("change", *map(right, heads), rows=rows), indent=4)
        if with_ab:
            print(
                "    model vs A/B: the model's gain minus the published runs' on pairs that made the same change "
                "(points, pairs; validate --pairs)"
            )
    else:
        print(f"    no single change shortens the step by more than {format_percent(MIN_GAIN)}")
    if what.refused:
        print(f"  refused ({len(what.refused)} of {what.tried} tried):")
        for r in what.refused[:3]:
            print(f"    {r.label}: {r.reason}")


def _ab_cell(ev: Evidence | None) -> str:
    """``+15.7 pts (2)``: the model's mean excess of gain over the published pairs of a change, and their count."""
    if ev is None:
        return "-"
    return f"{100 * ev.excess:+.1f} pts ({ev.pairs})"


@project_app.command("sweep")
@option_set("net", _NetworkOptions)
def _sweep(
    workload: str = typer.Argument(..., help="workload preset or YAML file"),
    topology: str = typer.Option(..., "--topology", "-t"),
    gpus: int = typer.Option(..., "--gpus", "-n"),
    vary: list[str] = typer.Option([], "--vary", help="path=v1,v2 (workload.*, layout.*, topology.*, gpus)"),
    tp: int = typer.Option(1, "--tp"),
    pp: int = typer.Option(1, "--pp"),
    cp: int = typer.Option(1, "--cp"),
    vpp: int = typer.Option(1, "--vpp"),
    ep: int = typer.Option(1, "--ep"),
    zero: int = typer.Option(1, "--zero"),
    recompute: str = typer.Option("selective", "--recompute"),
    search_layout: bool = typer.Option(False, "--search-layout", help="find the best layout at every point"),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray (RAY_ADDRESS)"),
    workers: int | None = typer.Option(None, "--workers", help="local processes (default: all cores)"),
    metric: str = typer.Option("tokens_per_s", "--metric", help="tokens_per_s, mfu, step_time_s, memory_gb"),
    plot_path: str | None = typer.Option(None, "--plot", help="write a PNG of the metric here"),
    top: int = typer.Option(5, "--top", help="best configurations to list"),
    accelerators: str | None = typer.Option(None, "--accelerators", help=_ACCELERATORS_HELP),
    as_json: bool = typer.Option(False, "--json"),
    save: bool = typer.Option(False, "--save", help="also keep the result in the store (--db) for `commlens serve`"),
    db: str | None = DB,
    *,
    net: _NetworkOptions,
) -> None:
    """Evaluate a what-if grid; print every point, the best ones and why the others cannot run."""
    from commlens.project.sweep import Base, grid, parse_vary, plot, run_sweep

    if workers is not None and workers < 1:
        fail(f"--workers: must be >= 1, got {workers}")
    if top < 1:
        fail(f"--top: must be >= 1, got {top}")
    files = accelerators_in_force(accelerators)

    with errors_as_exit("--vary "):
        grid_spec = parse_vary(vary)
    with errors_as_exit():
        points = grid(grid_spec) if grid_spec else [{}]
        layout: Overrides = {} if search_layout else {"tp": tp, "pp": pp, "cp": cp, "vpp": vpp, "ep": ep, "zero": zero}
        layout["recompute"] = recompute
        base = Base(workload, topology, gpus, layout, {}, files, net.sim_options())
        result = run_sweep(
            base,
            points,
            search=search_layout,
            executor=executor,
            workers=workers,
        )
    reasons = result.infeasible_reasons()
    if plot_path and result.feasible and grid_spec:
        plot(result, grid_spec, metric, plot_path)
    document = {
        "rows": [r.as_dict() for r in result.rows],
        "best": [r.as_dict() for r in result.best(metric, top)],
        "infeasible": dict(reasons),
    }
    if save:
        from commlens.cli.reports_cmd import save_document

        save_document(db, "sweep", document)
    if as_json:
        print(json.dumps(document, indent=1, default=str))
        return
    keys = list(grid_spec)
    _print_sweep_rows(keys, result.rows)
    print(f"\n{len(result.feasible)} of {len(result.rows)} points feasible; best by {metric}:")
    for r in result.best(metric, top):
        print("  " + ", ".join(f"{k}={r.point[k]}" for k in keys) + f": {metric} {r.figures[metric]:.4g}")
    if reasons:
        print("infeasible:")
        for reason, n in reasons.most_common():
            print(f"  {n:6d}  {reason}")
    if plot_path and result.feasible and grid_spec:
        print(f"plot: {plot_path}")


def _print_sweep_rows(keys: list[str], rows: list[SweepRow]) -> None:
    """One row per point: its values, then the projection, or (in the layout column) why it cannot run."""
    from commlens.cli.tables import new_table, print_table, right

    table = new_table(*map(right, keys), *map(right, ("step s", "tokens/s", "MFU %", "mem GB")), "layout")
    for r in rows:
        head = [str(r.point[k]) for k in keys]
        if r.error is not None:
            table.add_row(*head, "", "", "", "", f"infeasible: {r.error}")
            continue
        lay, f = r.layout, r.figures
        table.add_row(
            *head,
            f"{f['step_time_s']:.3f}",
            f"{f['tokens_per_s']:.4g}",
            f"{f['mfu'] * 100:.1f}",
            f"{f['memory_gb']:.1f}",
            f"tp{lay['tp']} cp{lay['cp']} pp{lay['pp']}x{lay['vpp']} dp{lay['dp']} ep{lay['ep']} z{lay['zero']}",
        )
    print_table(table)


@project_app.command("validate")
def _validate(
    table_name: str = typer.Option(
        "all",
        "--table",
        help="a published table's name, all (see --list), or a .yaml file of your own runs in the same format",
    ),
    list_tables: bool = typer.Option(False, "--list", help="list the tables and their sources"),
    pairs: bool = typer.Option(
        False,
        "--pairs",
        help="the published A/B pairs instead: runs of one table that differ in one setting, the gain it brought "
        "against the model's (what the what-if would print)",
    ),
    as_json: bool = typer.Option(False, "--json"),
    accelerators: str | None = typer.Option(None, "--accelerators", help=_ACCELERATORS_HELP),
) -> None:
    """Predicted vs published figures of training runs, per row, per table and overall (exit 1: targets missed)."""
    from commlens.project.validate import table_names
    from commlens.project.validation_report import describe_table, file_report, validation_report

    names = table_names()
    if list_tables:
        with errors_as_exit():
            for name in names:
                print(f"{name}: {describe_table(name)}")
        return
    own_file = table_name.endswith((".yaml", ".yml"))  # a table of one's own runs, not a published one
    if table_name != "all" and table_name not in names and not own_file:
        fail(f"--table: no published table {table_name!r} (have: {', '.join(names)}, all, or a .yaml file)")
    if pairs:
        _validate_pairs(names if table_name == "all" else [table_name], accelerators, as_json, own_file)
        return
    with errors_as_exit():
        files = accelerators_in_force(accelerators)
        if own_file:
            report = file_report(table_name, files)
        else:
            report = validation_report(names if table_name == "all" else [table_name], files)
    summary = report.summary
    if as_json:
        print(json.dumps(report.as_dict(), indent=1))
    else:
        _print_validation(list(report.rows), summary)
        if report.memory is not None and summary.memory is not None:
            _print_memory_validation(report.memory, summary.memory)
        if report.rows and report.memory is not None:
            print(f"\ntargets (throughput and memory): {'met' if report.targets_met else 'NOT met'}")
    if not report.targets_met:
        raise typer.Exit(1)


def _validate_pairs(names: list[str], accelerators: str | None, as_json: bool, own_file: bool = False) -> None:
    """The A/B pairs of the tables (``own_file``: of the one file of one's own runs in ``names``): every setting
    pair, then the release and batch pairs in one line each."""
    from dataclasses import asdict

    from commlens.cli.tables import new_table, print_table, right
    from commlens.project.validate import ab_pairs, load_table_file, other_pair_lines, set_pairs, validate_set
    from commlens.results.units import format_percent

    with errors_as_exit():
        files = accelerators_in_force(accelerators)
        if own_file:
            own = load_table_file(names[0])
            found = set_pairs(own, validate_set(own, files))
        else:
            found = ab_pairs(names, files)
    if as_json:
        print(json.dumps({"pairs": [{**asdict(p), "difference": p.difference} for p in found]}, indent=1, default=str))
        return
    settings = [p for p in found if p.kind == "setting"]

    if settings:
        table = new_table("table", "workload", "topology", right("GPUs"), "change", *map(right, ("published", "model")))
        for p in settings:
            table.add_row(
                p.table,
                p.workload,
                p.topology,
                str(p.gpus),
                p.change,
                format_percent(p.published_gain, sign=True),
                format_percent(p.modelled_gain, sign=True),
            )
        print_table(table)
        same = sum((p.published_gain > 0) == (p.modelled_gain > 0) for p in settings)
        mean = sum(abs(p.difference) for p in settings) / len(settings)
        print(
            f"  {len(settings)} pairs that change one setting: the model's gain has the published sign in {same}, "
            f"differs from it by {100 * mean:.1f} points of gain on average, at most "
            f"{100 * max(abs(p.difference) for p in settings):.1f}"
        )
    else:
        print("no pair of runs that differ in one setting")
    for line in other_pair_lines(found):
        print(f"  {line}")


def _print_memory_validation(memory, stats: MemoryStats) -> None:
    """One row per memory figure: published and predicted GB (1e9 B), the error, or whether a bound is met."""
    from commlens.cli.tables import new_table, print_table, right
    from commlens.results.units import format_percent

    print("\nmemory (GB = 1e9 B per GPU)")
    table = new_table("figure", "measures", "stage", *map(right, ("published GB", "predicted GB", "error")))
    for m in memory:
        if m.predicted_bytes is None:
            table.add_row(m.name, m.measures, m.stage, f"{m.published_bytes / 1e9:.4g}", "refused", m.refused)
            continue
        verdict = ("fits" if m.fits else "over the bound") if m.kind == "bound" else format_percent(m.error, sign=True)
        table.add_row(
            m.name, m.measures, m.stage, f"{m.published_bytes / 1e9:.4g}", f"{m.predicted_bytes / 1e9:.4g}", verdict
        )
    print_table(table)
    mean = "-" if stats.mean_abs_error is None else format_percent(stats.mean_abs_error)
    top = "-" if stats.max_abs_error is None else format_percent(stats.max_abs_error)
    refused = f", {stats.refused} refused" if stats.refused else ""
    print(
        f"  memory: {stats.figures} figures, mean absolute error {mean}, max {top}, "
        f"{stats.within_10pct} of {stats.figures - stats.bounds - stats.refused} within 10%, "
        f"bounds met {stats.bounds_met} of {stats.bounds}{refused} "
        f"(targets: every figure within 10%, every bound met: {'met' if stats.targets_met else 'NOT met'})"
    )


def _print_validation(rows, summary: ValidationSummary) -> None:
    from commlens.cli.tables import new_table, print_table, right
    from commlens.results.units import format_percent

    units = {"tflops_per_gpu": "TFLOP/s", "mfu": "MFU", "tokens_per_s_per_gpu": "tok/s/GPU", "step_time_s": "step s"}

    def pct(v: float | None) -> str:
        return "-" if v is None else format_percent(v)

    if not rows:
        return
    current = ""  # the table being printed (names are not empty)
    table = None
    for r in rows:
        if r.table != current:
            if table is not None:
                print_table(table)
                _print_table_stats(current, summary.tables[current], pct)
            current = r.table
            print(f"\n{r.table}")
            table = new_table(
                "workload",
                "topology",
                right("GPUs"),
                "layout",
                "figure",
                *map(right, ("published", "predicted", "error")),
                "in band",
            )
        assert table is not None
        predicted, error = (
            ("refused", r.refused)
            if r.predicted is None
            else (f"{r.predicted:.4g}", format_percent(r.error, sign=True))
        )
        in_band = "-" if r.in_band is None else "yes" if r.in_band else "no"
        table.add_row(
            r.workload,
            r.topology,
            str(r.gpus),
            r.layout,
            units[r.metric],
            f"{r.published:.4g}",
            predicted,
            error,
            in_band,
        )
    if table is not None:
        print_table(table)
        _print_table_stats(current, summary.tables[current], pct)
    o = summary.overall
    assert o is not None, "a summary of rows has their overall figures"
    print(
        f"\noverall: {o.rows} rows, mean absolute error {pct(o.mean_abs_error)}, max {pct(o.max_abs_error)}"
        + (f", {o.refused} refused" if o.refused else "")
        + " (targets: mean <= 6%, each table <= 8% (SC'21 <= 3%), every row within 20%, none refused: "
        + f"{'met' if summary.throughput_targets_met else 'NOT met'})"
    )
    cov = summary.band_coverage
    if cov is not None and (coverage := cov["coverage"]) is not None:
        how = (
            "the band a projection prints, fitted on the published tables"
            if cov["fit"] == "shipped"
            else "each row left out of its own family's fit"
        )
        print(
            f"80% band ({how}): covers {cov['covered']} of {cov['rows']} rows "
            f"({format_percent(coverage)}; target 70% to 90%)"
        )


def _print_table_stats(name, stats: TableStats, pct) -> None:
    refused = f", {stats.refused} refused" if stats.refused else ""
    print(f"  {name}: mean absolute error {pct(stats.mean_abs_error)}, max {pct(stats.max_abs_error)}{refused}")


from commlens.cli.calibrate_cmd import calibrate  # noqa: E402  (a project subcommand, in its own module)

project_app.command("calibrate")(calibrate)
