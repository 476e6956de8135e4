"""``commlens tune``: sweep algorithms x sizes here (or on an emulated cluster), write the tuning table ``auto`` reads.

Exit codes: 0 written; 2 bad input (unknown op or algorithm, bad sizes, an
unreadable existing table); 1 when the sweep fails (a rank fails, wrong results).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import app, fail
from commlens.cli.options import DB
from commlens.cli.tables import left, new_table, print_table, right

if TYPE_CHECKING:
    from commlens.algos.tuning import Bucket, Entry


def _us(seconds: float | None) -> str:
    from commlens.results.units import format_us

    return format_us(seconds)


def _bucket_text(low: int, high: int | None) -> str:
    return f">= {low}" if high is None else f"{low} .. {high - 1}"


def _bucket_cells(b: Bucket) -> tuple[str, ...]:
    """One bucket's row: the range, the winner and its time, the built-in's time and the ratio, the runner-up."""
    from commlens.algos.tuning import BUILTIN

    ranked = b.ranked()
    runner, runner_t = ranked[1] if len(ranked) > 1 else (None, None)
    builtin = b.times_s.get(BUILTIN)
    best_t = b.times_s.get(b.algo)
    ratio = f"{best_t / builtin:.2f}x" if best_t is not None and builtin else "-"
    return (
        _bucket_text(b.min_bytes, b.max_bytes),
        str(b.size_bytes),
        b.algo,
        _us(best_t),
        _us(builtin),
        ratio,
        runner or "-",
        _us(runner_t),
    )


def _print_entry(entry: Entry) -> None:
    ctx = entry.context
    hosts = ctx.get("hosts", 1)
    print(
        f"# {entry.op} on {entry.world_size} ranks ({hosts} host{'s' if hosts != 1 else ''} x "
        f"{entry.ranks_per_host}, {entry.backend}/{entry.device}), {ctx.get('stat', '?')} time, "
        f"run {str(ctx.get('run_id', '?'))[:12]}"
    )
    table = new_table(
        right("bucket (B)"),
        right("size (B)"),
        left("best"),
        right("time (us)"),
        right("builtin (us)"),
        right("vs builtin"),
        left("runner-up"),
        right("time (us)"),
    )
    for b in entry.buckets:
        table.add_row(*_bucket_cells(b))
    print_table(table)


@app.command("tune")
def tune_cmd(
    op: str = typer.Option(
        "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce",
        "--op",
        help="ops to tune: a comma list or 'all' (every op commlens has algorithms for)",
    ),
    min_bytes: str = typer.Option("8", "--min-bytes", "-b", help="smallest size (K/M/G suffixes)"),
    max_bytes: str = typer.Option("64M", "--max-bytes", "-e", help="largest size (K/M/G suffixes)"),
    step_factor: int = typer.Option(4, "--step-factor", "-f", help="multiply the size by this each step"),
    iters: int = typer.Option(20, "--iters", "-n", help="timed iterations per row"),
    warmup: int = typer.Option(5, "--warmup", "-w", help="untimed warm-up iterations per row"),
    check_iters: int = typer.Option(1, "--check-iters", "-c", help="validated iterations per row (0: no check)"),
    algo: str = typer.Option("all", "--algo", help="candidates: 'all' or a comma list (the built-in is always timed)"),
    chunk_bytes: str | None = typer.Option(None, "--chunk-bytes", help="chunk size for pipelined algorithms"),
    interleave: bool = typer.Option(
        True,
        "--interleave/--no-interleave",
        help="time each row's candidates round-robin, iteration by iteration, so drift "
        "in the machine's load hits every one alike (bench --interleave)",
    ),
    stat: str = typer.Option("p50", "--stat", help="which time decides: p50 (default), mean or min"),
    backend: str = typer.Option("gloo", "--backend", help="torch.distributed backend"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    nproc: int = typer.Option(4, "--nproc", help="local ranks"),
    cluster: str | None = typer.Option(None, "--cluster", help="run on this emulated cluster (root)"),
    ranks_per_host: int | None = typer.Option(None, "--ranks-per-host", help="with --cluster"),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="tuning table to write (default: $COMMLENS_TUNING or ~/.cache/commlens/tuning.json)",
    ),
    replace: bool = typer.Option(False, "--replace", help="overwrite the table instead of merging into it"),
    db: str | None = DB,
    no_store: bool = typer.Option(False, "--no-store", help="do not store the sweep's run"),
    tag: str = typer.Option("tune", "--tag", help="tag of the stored run"),
    show_table: bool = typer.Option(False, "--show-table", help="print the sweep's nccl-tests table too"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress display"),
    as_json: bool = typer.Option(False, "--json", help="print the written entries as JSON"),
) -> None:
    """Time every algorithm and the built-in per size; write the table `algo="auto"` uses (see docs/algos.md)."""
    from commlens.algos import ALGO_OPS
    from commlens.algos.tuning import TuningError, load_table, save_table, table_path, table_to_dict, with_entries
    from commlens.bench.tune import NothingToTune, SweepFailed, TuneSettings, tune
    from commlens.cli.bench_cmd import Terminal, say, store
    from commlens.cli.bench_outputs import Destinations, check_destinations, check_file_destination, exit_code
    from commlens.cli.errors import errors_as_exit
    from commlens.errors import CommlensError

    ops = list(ALGO_OPS) if op.strip().lower() == "all" else [o.strip() for o in op.split(",") if o.strip()]
    for name in ops:
        if name not in ALGO_OPS:
            fail(f"commlens tunes {', '.join(ALGO_OPS)}; {name!r} is not one of them")
    path = (output or table_path()).expanduser()
    existing = None
    if path.exists() and not replace:
        try:
            existing = load_table(path)
        except TuningError as e:
            fail(f"{e} (fix or remove it, or pass --replace to overwrite it)", e.exit_code)
    with errors_as_exit():  # bad input (exit 2), a failed sweep (its code)
        check_file_destination("--output", str(path))  # before the sweep, not after it
        settings = TuneSettings(
            ops=",".join(ops),
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            step_factor=step_factor,
            iters=iters,
            warmup=warmup,
            check_iters=check_iters,
            algos=algo,
            chunk_bytes=chunk_bytes,
            interleave=interleave,
            stat=stat,
            backend=backend,
            device=device,
            nproc=nproc,
            cluster=cluster,
            ranks_per_host=ranks_per_host,
            store=not no_store,
            tag=tag,
        )
        to = Destinations(db=db, store=not no_store, tag=tag)
        check_destinations(to)
        with Terminal(print_table=show_table, quiet=quiet or as_json) as terminal:
            try:
                run, entries = tune(settings, on_event=terminal.on_event)
            except SweepFailed as e:
                store(e.run, to)
                exit_code(e.run, e.wrong, say)  # names each wrong result
                raise
            except NothingToTune as e:
                store(e.run, to)
                raise
        store(run, to)
    table = with_entries(existing, entries, "commlens tune " + " ".join(shlex.quote(a) for a in sys.argv[2:]))
    try:
        save_table(table, path)
        load_table(path)  # what auto will read: the round trip must hold
    except (OSError, CommlensError) as e:
        fail(f"cannot write the tuning table {path}: {e}")
    if as_json:
        doc = table_to_dict(table)
        doc["path"] = str(path)
        doc["written"] = [e.op for e in entries]
        print(json.dumps(doc, indent=1))
        return
    for entry in entries:
        _print_entry(entry)
    kept = len(table.entries) - len(entries)
    print(
        f"# wrote {path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} from run {run.run_id[:12]}"
        + (f", {kept} kept from before" if kept else "")
    )
