"""``commlens runs`` and ``commlens show``: stored runs."""

from __future__ import annotations

import json
from typing import Optional

import typer

from commlens.cli.app import app, fail


def _open_store(db: Optional[str]):
    from commlens.store import Store, StoreError

    try:
        return Store.open(db)
    except StoreError as e:
        fail(str(e), 2)


@app.command("runs")
def runs_cmd(
    tag: Optional[str] = typer.Option(None, help="only runs with this tag"),
    op: Optional[str] = typer.Option(None, help="only runs measuring this op"),
    since: Optional[str] = typer.Option(None, help="only runs started at or after this ISO date/time"),
    limit: int = typer.Option(50, help="at most this many runs, newest first"),
    db: Optional[str] = typer.Option(None, help="result store URL or SQLite path"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """List stored runs, newest first."""
    from dataclasses import asdict

    from commlens.store import StoreError

    with _open_store(db) as store:
        try:
            rows = store.list_runs(tag=tag, op=op, since=since, limit=limit)
        except (StoreError, ValueError) as e:
            fail(str(e), 2)
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=1, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for col in ("run", "started (UTC)", "status", "ranks", "backend", "ops", "rows", "avg busbw GB/s", "tag"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.run_id[:12], str(r.started_at)[:19], r.status, str(r.world_size), r.backend,
                      ",".join(r.ops), str(r.nmeasurements), f"{r.avg_busbw_bytes_per_s / 1e9:.3f}", r.tag or "")
    Console(soft_wrap=True).print(table)
    if not rows:
        print("no runs stored yet: `commlens bench` stores one")


@app.command("show")
def show_cmd(
    run: str = typer.Argument(..., help="run id or a unique prefix of at least 4 characters"),
    db: Optional[str] = typer.Option(None, help="result store URL or SQLite path"),
    as_json: bool = typer.Option(False, "--json", help="print the run as commlens JSON"),
) -> None:
    """Print a stored run again: the nccl-tests table, or its JSON."""
    from commlens.results.jsonfmt import run_to_dict
    from commlens.results.table import run_table_lines, system_header_lines
    from commlens.store import StoreError

    with _open_store(db) as store:
        try:
            found = store.get_run(run)
        except StoreError as e:
            fail(str(e), 2)
    doc = run_to_dict(found)
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    start = {"run_id": doc["run_id"], "config": doc["config"], "system": doc["system"]}
    rows: dict[tuple, dict] = {}
    for m in doc["measurements"]:
        key = (m["op"], m["algo"], m["dtype"], m["redop"], m["root"], m["size_bytes"])
        row = rows.setdefault(key, {"size_bytes": m["size_bytes"], "count": m["count"], "dtype": m["dtype"],
                                    "redop": m["redop"], "root": m["root"], "measurements": []})
        row["measurements"].append(m)
    checked = [m["nwrong"] for m in doc["measurements"] if m["nwrong"] is not None]
    lines = system_header_lines(start) if "ops" in doc["config"] else []
    lines += [f"# {n}" for n in doc["notes"]]
    lines += run_table_lines(rows.values(), sum(checked) if checked else None, doc["avg_busbw_bytes_per_s"])
    lines.append(f"# status {doc['status']}  started {doc['started_at']}  tag {doc['tag'] or '-'}  "
                 f"revision {doc['revision'] or '-'}  fingerprint {doc['system']['fingerprint']}")
    print("\n".join(lines))
