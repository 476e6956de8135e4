"""``commlens model predict | fit | check``: cost models on topologies, calibrated and checked against runs.

Exit codes: 0 done; 2 bad input (unknown preset or op, bad size, an
algorithm or job the topology cannot run, an unknown run); 1 when
``check --max-mape`` is exceeded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from commlens.cli.app import command_group, fail
from commlens.cli.errors import errors_as_exit
from commlens.cli.numbers import checked
from commlens.cli.options import DB
from commlens.cli.run_refs import runs_named
from commlens.cli.topology_cmd import load_or_fail

if TYPE_CHECKING:
    from commlens.model import Prediction
    from commlens.model.fit import Residual

model_app = command_group("model")

_TOPOLOGY_HELP = "a preset (see `commlens topology list`) or a topology YAML file"


def _size(text: str, option: str) -> int:
    from commlens.results.units import parse_size

    with errors_as_exit(f"{option}: "):
        return parse_size(text)


def _ops(text: str) -> list[str]:
    from commlens.ops import parse_ops

    with errors_as_exit():
        return [spec.name for spec in parse_ops(text)]


def _us(seconds: float) -> str:
    from commlens.results.units import format_us

    return format_us(seconds)


def _gbps(bytes_per_s: float, decimals: int = 2) -> str:
    from commlens.results.units import format_gbps

    return format_gbps(bytes_per_s, decimals)


def _shape(nodes: int, ranks_per_host: int, ranks: int) -> str:
    return f"{nodes} node{'s' if nodes != 1 else ''} x {ranks_per_host} ranks = {ranks} ranks"


# ---- predict ------------------------------------------------------------------------------------


@model_app.command("predict")
def predict_cmd(
    topology: str = typer.Option(..., "--topology", "-t", help=_TOPOLOGY_HELP),
    op: str = typer.Option("all_reduce", "--op", help="op, comma list or 'all' (with --sweep)"),
    size: str | None = typer.Option(None, "--size", "-s", help="message size, nccl-tests meaning (K/M/G suffixes)"),
    nodes: int = typer.Option(1, "--nodes", "-N", help="nodes in the job"),
    ranks_per_host: int | None = typer.Option(
        None, "--ranks-per-node", help="ranks per node (default: the topology's accelerators per node)"
    ),
    algo: str = typer.Option("auto", "--algo", "-a", help="algorithm, 'auto' (fastest) or 'all' (compare every one)"),
    sweep: bool = typer.Option(False, "--sweep", help="a predicted nccl-tests table over -b .. -e"),
    min_bytes: str = typer.Option("8", "--min-bytes", "-b", help="smallest size of --sweep"),
    max_bytes: str = typer.Option("1G", "--max-bytes", "-e", help="largest size of --sweep"),
    step_factor: int = typer.Option(2, "--step-factor", "-f", help="size multiplier between --sweep rows"),
    dtype: str = typer.Option("float32", "--dtype", "-d", help="datatype, for the count column"),
    breakdown: bool = typer.Option(False, "--breakdown", help="print every latency/bandwidth term"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Predict time, algBW and busBW of a collective (or a sweep of sizes) on a topology."""
    from commlens.model.predict import layout_for

    topo = load_or_fail(topology)
    ops = _ops(op)
    if nodes < 1:
        fail(f"--nodes must be >= 1, got {nodes}")
    with errors_as_exit():
        layout = layout_for(topo, nodes, ranks_per_host)
    if sweep:
        if size is not None:
            fail("--size and --sweep exclude each other: a sweep runs -b .. -e")
        if algo == "all":
            fail("--algo all compares algorithms for one size; give --size instead of --sweep")
        if step_factor < 2:
            fail(f"--step-factor must be >= 2, got {step_factor}")
        lo, hi = _size(min_bytes, "--min-bytes"), _size(max_bytes, "--max-bytes")
        if lo < 1 or hi < lo:
            fail(f"sizes must satisfy 1 <= --min-bytes <= --max-bytes, got {lo} and {hi}")
        _predict_sweep(topo, ops, lo, hi, step_factor, dtype, algo, layout, as_json)
        return
    if size is None:
        fail("give --size (a message size) or --sweep")
    if len(ops) != 1:
        fail("one --op at a time without --sweep")
    nbytes = _size(size, "--size")
    if algo == "all":
        _predict_all(topo, ops[0], nbytes, layout, as_json)
        return
    from commlens.model import predict

    with errors_as_exit():
        pred = predict(topo, ops[0], nbytes, algo=algo, layout=layout)
    if as_json:
        print(json.dumps(pred.as_dict(with_breakdown=True), indent=1))
        return
    chosen = f"auto -> {pred.algo}" if pred.chosen_by_auto else pred.algo
    print(
        f"# {topo.name}: {_shape(layout.nodes, layout.ranks_per_host, layout.ranks)}; "
        f"{pred.op} {nbytes} B, algo {chosen}"
    )
    print(
        f"time {_us(pred.time_s)} us   algBW {_gbps(pred.algbw_bytes_per_s)} GB/s   "
        f"busBW {_gbps(pred.busbw_bytes_per_s)} GB/s   bottleneck {pred.bottleneck}"
    )
    if breakdown:
        _print_breakdown(pred)


def _print_breakdown(pred: Prediction) -> None:
    from commlens.cli.tables import new_table, print_table, right

    table = new_table(right("stage"), "level", "term", right("amount"), right("time (us)"), "critical")
    for t in pred.terms:
        amount = f"{t.amount:.0f} msg" if t.kind in ("latency", "launch") else f"{t.amount:.0f} B"
        table.add_row(str(t.stage), t.level, t.kind, amount, _us(t.time_s), "*" if t.critical else "")
    print_table(table)


def _predict_all(topo: Any, op: str, nbytes: int, layout: Any, as_json: bool) -> None:
    from commlens.model import InfeasibleError
    from commlens.model.predict import Prediction, predict_algorithms

    found = predict_algorithms(topo, op, nbytes, layout=layout)
    if as_json:
        rows = [
            {"op": op, "algo": name, "size_bytes": nbytes, "infeasible": str(pred)}
            if isinstance(pred, InfeasibleError)
            else pred.as_dict(with_breakdown=False)
            for name, pred in found.items()
        ]
        print(json.dumps(rows, indent=1))
        return
    print(f"# {topo.name}: {_shape(layout.nodes, layout.ranks_per_host, layout.ranks)}; {op} {nbytes} B")
    from commlens.cli.tables import new_table, print_table, right

    table = new_table("algo", right("time (us)"), right("algbw GB/s"), right("busbw GB/s"), "bottleneck")
    feasible = [pred for pred in found.values() if isinstance(pred, Prediction)]
    fastest = min(feasible, key=lambda pred: pred.time_s).algo if feasible else None
    for name, pred in found.items():
        if isinstance(pred, InfeasibleError):
            table.add_row(name, "-", "-", "-", f"cannot run: {pred}")
            continue
        mark = "  <- fastest" if pred.algo == fastest else ""
        table.add_row(
            pred.algo,
            _us(pred.time_s),
            _gbps(pred.algbw_bytes_per_s),
            _gbps(pred.busbw_bytes_per_s),
            f"{pred.bottleneck}{mark}",
        )
    print_table(table)


def _predict_sweep(
    topo: Any, ops: list[str], lo: int, hi: int, factor: int, dtype: str, algo: str, layout: Any, as_json: bool
) -> None:
    from commlens.model.predict import predicted_table, sweep_sizes
    from commlens.results.nccltests_json import to_nccl_tests

    with errors_as_exit():
        table = predicted_table(topo, ops, sweep_sizes(lo, hi, factor), dtype=dtype, layout=layout, algo=algo)
    if as_json:
        print(
            json.dumps(
                {
                    "topology": topo.name,
                    "nodes": layout.nodes,
                    "ranks_per_node": layout.ranks_per_host,
                    "world_size": layout.ranks,
                    "algo": algo,
                    "rows": [row.as_dict() for row in table],
                },
                indent=1,
            )
        )
        return
    print(
        f"# commlens model predict  {topo.name}: {_shape(layout.nodes, layout.ranks_per_host, layout.ranks)}"
        f"  algo {algo}  (predicted, not measured)"
    )
    head = "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {:>9}  {:>8}  {:>8}  {:<18}  {}"
    current = None
    for r in table:
        if r.op != current:
            current = r.op
            print(f"# {current}")
            print(
                "#"
                + head.format("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "algo", "bottleneck")[
                    1:
                ]
            )
            print("#" + head.format("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "")[1:])
        redop, root = to_nccl_tests(r.redop, r.root)
        left = (r.size_bytes, r.count, r.dtype, redop, root)
        p = r.prediction
        if p is None:
            print(head.format(*left, "-", "-", "-", "-", r.infeasible))
        else:
            print(
                head.format(
                    *left, _us(p.time_s), _gbps(p.algbw_bytes_per_s), _gbps(p.busbw_bytes_per_s), p.algo, p.bottleneck
                )
            )


# ---- fit and check -------------------------------------------------------------------------------


def _print_residuals(residuals: tuple[Residual, ...]) -> None:
    from commlens.cli.tables import new_table, print_table, right
    from commlens.results.units import format_percent

    table = new_table(
        "op",
        right("size (B)"),
        right("place"),
        "model",
        right("meas (us)"),
        right("pred (us)"),
        right("meas GB/s"),
        right("pred GB/s"),
        right("error"),
    )
    for r in residuals:
        o = r.obs
        table.add_row(
            o.op,
            str(o.size_bytes),
            "in" if o.in_place else "out",
            f"{o.model_op}/{o.model_algo}",
            _us(o.measured_s),
            _us(r.predicted_s),
            _gbps(r.busbw(o.measured_s), 3),
            _gbps(r.busbw(r.predicted_s), 3),
            format_percent(r.error, sign=True),
        )
    print_table(table)


def _value(v: float, unit: str) -> str:
    from commlens.results.units import format_us

    if unit == "s":
        return f"{format_us(v, decimals=3)} us"
    return f"{v / 1e9:.4g} GB/s"


_STAT_HELP = "which time of each row: mean (as nccl-tests), p50 or min"
_ALGO_HELP = (
    "only rows that ran these algorithms (comma list; 'builtin' for the backend's own collectives; "
    "default: every row but auto's)"
)


def _algos(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        fail("--algo: no algorithm given")
    return names


# ---- fit --------------------------------------------------------------------------------------------


@model_app.command("fit")
def fit_cmd(
    runs: list[str] = typer.Argument(
        ...,
        help="run ids (or unique prefixes) in the store, tags, or result files; run:, tag: or file: in front says which",
    ),
    db: str | None = DB,
    topology: str = typer.Option("local-cpu", "--topology", "-t", help="template: " + _TOPOLOGY_HELP),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the calibrated topology (YAML) here"),
    name: str | None = typer.Option(None, "--name", help="calibrated topology's name (default TEMPLATE-fitted)"),
    stat: str = typer.Option("mean", "--stat", help=_STAT_HELP),
    min_size: str = typer.Option("1", "--min-size", help="ignore rows smaller than this"),
    algo: str | None = typer.Option(None, "--algo", help=_ALGO_HELP),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Calibrate a topology from measured runs: fitted constants with their uncertainty, every row's residual.

    Robust regression (soft-L1 on log predicted/measured); --output writes the calibrated topology (YAML).
    """
    from commlens.cli.tables import new_table, print_table, right
    from commlens.model.fit import fit_runs
    from commlens.model.observe import STATS
    from commlens.topology import dump_topology

    if stat not in STATS:
        fail(f"--stat must be one of {', '.join(STATS)}, got {stat!r}")
    template = load_or_fail(topology)
    loaded = runs_named(runs, db)
    min_size_bytes = _size(min_size, "--min-size")
    with errors_as_exit():
        result = fit_runs(loaded, template, stat=stat, min_size_bytes=min_size_bytes, name=name, algos=_algos(algo))
    if output is not None:
        try:
            dump_topology(result.topology, output)
        except OSError as e:
            fail(f"cannot write {output}: {e}")
    if as_json:
        print(
            json.dumps(
                {**result.as_dict(), "output": str(output) if output else None},
                indent=1,
                default=lambda v: None if v != v or v in (float("inf"),) else v,
            )
        )
        return
    backends = "/".join(sorted({r.obs.backend for r in result.residuals if r.obs.backend})) or "unknown backend"
    print(
        f"# fit {template.name} on {', '.join(r[:12] for r in result.runs)} ({backends}, "
        f"{len(result.residuals)} rows, {stat} time, robust soft-L1 loss)"
    )
    from commlens.results.units import format_percent

    table = new_table("constant", right("template"), right("fitted"), right("± 1 sigma"), "note")
    for p in result.params:
        if p.held_because:
            shown = _value(p.initial, p.unit) if p.initial > 0 else "-"
            table.add_row(p.name, shown, "held", "", f"({p.held_because})")
            continue
        sigma = (
            "undetermined"
            if p.relative_stderr is None or p.relative_stderr == float("inf")
            else format_percent(p.relative_stderr)
        )
        table.add_row(p.name, _value(p.initial, p.unit), _value(p.value, p.unit), sigma, "")
    print_table(table)
    print(f"# fit error: MAPE {result.mape_pct:.1f}%, max {result.max_ape_pct:.1f}% over {len(result.residuals)} rows")
    _print_residuals(result.residuals)
    if output is not None:
        print(f"# wrote {output} (topology {result.topology.name})")


# ---- check ------------------------------------------------------------------------------------------


@model_app.command("check")
def check_cmd(
    runs: list[str] = typer.Argument(
        ...,
        help="run ids (or unique prefixes) in the store, tags, or result files; run:, tag: or file: in front says which",
    ),
    topology: str = typer.Option("local-cpu", "--topology", "-t", help=_TOPOLOGY_HELP),
    db: str | None = DB,
    stat: str = typer.Option("mean", "--stat", help=_STAT_HELP),
    min_size: str = typer.Option("1", "--min-size", help="ignore rows smaller than this"),
    max_mape: float | None = typer.Option(None, "--max-mape", help="exit 1 when the MAPE (%) exceeds this"),
    algo: str | None = typer.Option(None, "--algo", help=_ALGO_HELP),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Predicted against measured for every row of a run: the error per row, per op (per algorithm) and overall."""
    from commlens.cli.tables import new_table, print_table, right
    from commlens.model.check import check_runs
    from commlens.model.observe import STATS

    if stat not in STATS:
        fail(f"--stat must be one of {', '.join(STATS)}, got {stat!r}")
    if max_mape is not None:
        checked(max_mape, "--max-mape", at_least=0)
    topo = load_or_fail(topology)
    loaded = runs_named(runs, db)
    min_size_bytes = _size(min_size, "--min-size")
    with errors_as_exit():
        result = check_runs(loaded, topo, stat=stat, min_size_bytes=min_size_bytes, algos=_algos(algo))
    if not result.residuals:
        fail("no usable rows to check (every row empty, zero-sized, a barrier, below --min-size or not --algo)")
    summary = result.summary
    if as_json:
        print(json.dumps(result.as_dict(), indent=1))
    else:
        print(
            f"# check {', '.join(sorted({r.obs.run_id[:12] for r in result.residuals}))} against "
            f"{topo.name} ({stat} time)"
        )
        _print_residuals(result.residuals)
        named = any(r.obs.algo != "builtin" for r in result.residuals)
        groups = result.by_algo() if named else result.by_op()
        table = new_table("# op/algo" if named else "# op", right("rows"), right("MAPE"), right("max"), right("bias"))
        for key, s in groups.items():
            table.add_row(
                f"# {key}",
                str(s["rows"]),
                f"{s['mape_pct']:.1f}%",
                f"{s['max_ape_pct']:.1f}%",
                f"{s['bias_pct']:+.1f}%",
            )
        print_table(table)
        print(
            f"# all: {summary['rows']} rows, MAPE {summary['mape_pct']:.1f}%, max {summary['max_ape_pct']:.1f}%, "
            f"bias {summary['bias_pct']:+.1f}%"
        )
    if max_mape is not None and summary["mape_pct"] > max_mape:
        print(f"error: MAPE {summary['mape_pct']:.1f}% exceeds --max-mape {max_mape:g}%", file=sys.stderr)
        raise typer.Exit(1)
