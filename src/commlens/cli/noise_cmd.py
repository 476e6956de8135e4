"""``commlens noise learn`` and ``commlens noise show``: each series' run-to-run variation (noise floor)."""

from __future__ import annotations

import json
from enum import Enum
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import command_group, fail, say
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB

if TYPE_CHECKING:
    from commlens.store.noise import NoiseFloor

noise_app = command_group("noise")


class GroupBy(str, Enum):
    revision = "revision"
    tag = "tag"
    all = "all"


@noise_app.command("learn")
def noise_learn(
    by: GroupBy = typer.Option(
        GroupBy.revision, "--by", help="runs alike: of one revision, of one tag, or all (an A/A history)"
    ),
    tag: str | None = typer.Option(None, help="only runs with this tag"),
    since: str | None = typer.Option(None, help="only runs from this ISO date/time on (UTC if no zone)"),
    fingerprint: str | None = typer.Option(None, help="only runs of this system fingerprint"),
    min_df: int = typer.Option(2, "--min-df", help="degrees of freedom a floor needs (runs minus groups)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the floors, store nothing"),
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Learn every series' noise floor from stored runs of the same code and keep it in the store.

    compare uses a series' floor so a side is never more precise than its history allows; detect ignores
    level shifts smaller than it. Exit code 2 when no series has enough history.
    """
    from commlens.regress import learn_floors, parse_utc
    from commlens.store import RunFilter, Store

    if min_df < 1:
        fail(f"--min-df {min_df}: must be >= 1")
    with errors_as_exit("--since: "):
        since_utc = None if since is None else parse_utc(since)
    with errors_as_exit():
        with Store.open(db, create=False) as store:
            ids = [
                s.run_id
                for s in store.list_runs(RunFilter(tag=tag, since=since_utc, fingerprint=fingerprint), limit=None)
            ]
            runs = list(store.iter_runs(ids, on_corrupt=lambda e: say("warning", f"skipped: {e}")))
            floors = learn_floors(runs, by=by.value, min_df=min_df)
            if not floors:
                fail(
                    f"no series has enough history among {len(runs)} runs: a floor needs runs of the same "
                    f"{'code' if by is GroupBy.all else by.value} ({min_df + 1} or more of one series, or pairs)"
                )
            if not dry_run:
                store.floors.save(floors)
    _print(
        floors,
        as_json,
        f"{'would store' if dry_run else 'stored'} {len(floors)} noise floors from "
        f"{len(runs)} runs (grouped by {by.value})",
    )


@noise_app.command("show")
def noise_show(
    fingerprint: str | None = typer.Option(None, help="only this system fingerprint"),
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """The stored noise floors, by system, op and size."""
    from commlens.store import Store

    with errors_as_exit(), Store.open(db, create=False) as store:
        floors = store.floors.list(None if fingerprint is None else [fingerprint])
    _print(floors, as_json, f"{len(floors)} noise floors")


def _print(floors: list[NoiseFloor], as_json: bool, summary: str) -> None:
    from commlens.results.text_tables import commented_table_lines
    from commlens.results.units import format_percent, format_size

    if as_json:
        print(json.dumps({"summary": summary, "floors": [f.as_dict() for f in floors]}, indent=1))
        return
    names = ["system", "op", "size", "dtype", "redop", "place", "floor", "runs", "groups", "learned (UTC)"]
    cells = [
        [
            f.fingerprint[:8],
            (f.key.op if f.key.algo == "builtin" else f"{f.key.op}/{f.key.algo}")
            + (f" on {f.key.group}" if f.key.group else ""),
            format_size(f.key.size_bytes),
            f.key.dtype,
            "-" if f.key.redop is None else f.key.redop,
            "in" if f.key.in_place else "out",
            format_percent(f.sd_log, decimals=2),
            str(f.runs),
            str(f.groups),
            f.learned_at[:19],
        ]
        for f in floors
    ]
    if cells:
        print("\n".join(commented_table_lines(names, cells, frozenset({"size", "floor", "runs", "groups"}))))
    print(f"# {summary}")
