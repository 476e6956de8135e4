"""commlens ingest FILE...: read other tools' outputs (the formats of ``commlens.ingest``) into the store."""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

import typer

from commlens.cli.app import app, fail, say
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB
from commlens.cli.text import terminal_safe
from commlens.ingest.registry import FORMATS

# Help texts list the registry's formats: "nccl-tests logs, ..., commlens run JSON (...)", "auto, ... or commlens".
_FILE_HELP = f"{', '.join(f.description for f in FORMATS.values())}; - reads standard input"
_NAMES = ("auto", *FORMATS)
_FORMAT_HELP = f"{', '.join(_NAMES[:-1])} or {_NAMES[-1]}"


@app.command("ingest")
def ingest_cmd(
    files: list[Path] = typer.Argument(..., metavar="FILE", help=_FILE_HELP),
    tag: str | None = typer.Option(None, help="label every run with this tag (a nightly, a branch)"),
    revision: str | None = typer.Option(None, help="the code revision the runs measured"),
    time: str | None = typer.Option(
        None,
        "--time",
        help="ISO date/time placing the files in history (their started_at); default: the file's "
        "own start time, else its modification time",
    ),
    fmt: str = typer.Option("auto", "--format", help=_FORMAT_HELP),
    op: str | None = typer.Option(
        None, help="the collective of an nccl-tests log that does not name it (wins over what its table suggests)"
    ),
    ranks: int | None = typer.Option(
        None, "--ranks", help="world size of an nccl-tests log fragment without its '#  Rank' lines (stored as given)"
    ),
    hosts: str | None = typer.Option(
        None, "--hosts", help="hosts of such a fragment: a count, or names separated by commas (stored as given)"
    ),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU model of such a fragment (stored as given)"),
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print what was ingested as JSON"),
    fail_below: float | None = typer.Option(
        None,
        "--fail-below",
        metavar="PCT",
        help="exit 1 when a run stored now is below its expected busBW by more than PCT % (commlens expect)",
    ),
    max_input_mib: float = typer.Option(
        256.0, "--max-input-mib", help="refuse a file (or pipe) larger than this, unread further"
    ),
) -> None:
    """Store other tools' results: each file read completely, then its runs stored in one transaction."""
    from commlens.cli.expect_cmd import (
        below_by_more_than,
        check_fail_below,
        judge_or_none,
        summary_lines,
        with_kept_verdict,
    )
    from commlens.errors import CommlensError
    from commlens.expect import with_log_facts
    from commlens.ingest import IngestWarning, load_source_runs, parse_time, read_source
    from commlens.results.jsonfmt import run_to_dict
    from commlens.store import Store, StoreError, db_url, default_db_url
    from commlens.store.db import DatabaseFault, parse_url
    from commlens.store.repo import RunBatch

    if fmt != "auto" and fmt not in FORMATS:
        fail(f"--format {fmt!r}: expected auto, {', '.join(FORMATS)}")
    if not max_input_mib > 0 or max_input_mib == float("inf"):  # also refuses NaN
        fail(f"--max-input-mib {max_input_mib}: expected a number of MiB > 0")
    max_input_bytes = int(max_input_mib * 2**20)
    if sum(str(path) == "-" for path in files) > 1:
        fail("- (standard input) can be given only once")
    started_at = None
    if time is not None:
        with errors_as_exit("--time: "):
            started_at = parse_time(time)
    if op is not None:
        from commlens.ops import get_op

        with errors_as_exit("--op: "):
            get_op(op)
    given = _given(ranks, hosts, gpu)
    with errors_as_exit():
        url = db_url(db) if db is not None else default_db_url()
        parse_url(url)  # a malformed --db is an error before any file is read
    check_fail_below(fail_below)
    failed = 0
    below: list[str] = []  # runs stored now that --fail-below fails
    ingested: list[dict[str, Any]] = []
    printed: list[tuple[str, str]] = []  # (file, line): what is stored, printed once every file is committed
    # The store is opened at the first run to save: an ingest that refuses every file creates no store file.
    # Every file's runs go into one transaction (a savepoint each: a file the store refuses leaves the
    # others), committed at the end: a database fault, or Ctrl-C, stores nothing of any file.
    batch: RunBatch | None = None
    with errors_as_exit(), contextlib.ExitStack() as closing:
        for path in files:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", IngestWarning)
                try:  # read once (a pipe can be read only once): detected, parsed and hashed from memory
                    if path.is_dir():  # a dump directory of per-process files: NCCL Inspector's
                        used, runs = _directory_runs(path, fmt, tag, revision, started_at, max_input_bytes)
                    else:
                        source = read_source(path, max_bytes=max_input_bytes)
                        used, runs = load_source_runs(
                            source, tag=tag, revision=revision, started_at=started_at, fmt=fmt, op=op, given=given
                        )
                        if used == "nccl-tests":  # its NCCL INFO lines, kept for expect (a text log: one run)
                            runs = [with_log_facts(run, source.text) for run in runs]
                        del source
                except CommlensError as e:
                    say("error", str(e))
                    failed += 1
                    continue
                finally:
                    for w in caught:
                        if issubclass(w.category, IngestWarning):
                            say("warning", str(w.message))
            # judged before saving, so that the verdict is kept with the run (show prints it without the model)
            verdicts = {run.run_id: judge_or_none(run) for run in runs}
            runs = [with_kept_verdict(run, verdicts[run.run_id]) for run in runs]
            if batch is None:
                store = closing.enter_context(Store.open(url))
                batch = closing.enter_context(store.batch())
            try:
                stored = batch.save_new(runs, label=str(path))
            except DatabaseFault:
                raise  # the transaction is lost: nothing of any file is stored
            except StoreError as e:
                say("error", f"{path}: {e}")
                failed += 1
                continue
            for run in runs:
                is_new = run.run_id not in stored
                if is_new and run.status == "check_failed":
                    for note in run.notes:
                        if note.startswith("results check failed"):
                            say(
                                "warning",
                                f"{path}: {note} (compare does not judge its failed rows; detect "
                                f"leaves the run out of history)",
                            )
                if not is_new:
                    say("", f"{path}: already stored as run {run.run_id} (same content); skipped")
                verdict = verdicts[run.run_id]
                if is_new and verdict is not None and below_by_more_than(verdict.status, verdict.pct, fail_below):
                    below.append(f"run {run.run_id[:12]} ({path}) is below expectation by {verdict.pct:.0f}%")
                if as_json:
                    entry = {"file": str(path), "format": used, "stored": is_new, "run": run_to_dict(run)}
                    entry["expect"] = verdict.as_dict() if verdict is not None else None
                    ingested.append(entry)
                elif is_new:
                    printed.append((str(path), terminal_safe(_summary(path, used, run))))
                    if verdict is not None:
                        lines = summary_lines(verdict, causes=1, ranges=False)
                        printed += [(str(path), terminal_safe(line)) for line in lines]
    refused = {label for label, _ in batch.refused} if batch is not None else set()
    for label, error in batch.refused if batch is not None else []:
        say("error", f"{label}: {error}")
        failed += 1
    ingested = [entry for entry in ingested if entry["file"] not in refused]
    shown = [line for label, line in printed if label not in refused]
    if shown:
        print("\n".join(shown))
    if as_json:
        print(json.dumps(ingested, indent=1))
    if failed:
        raise typer.Exit(2)
    if below:
        for line in below:
            say("error", f"{line} (more than {fail_below:g}%)")
        raise typer.Exit(1)


def _given(ranks: int | None, hosts: str | None, gpu: str | None) -> Any:
    """What the user says of a log fragment (--ranks, --hosts, --gpu), checked; None if nothing."""
    from commlens.ingest import GivenFacts
    from commlens.results.records import MAX_RANKS

    if ranks is not None and not 1 <= ranks <= MAX_RANKS:
        fail(f"--ranks {ranks}: expected 1..{MAX_RANKS}")
    names: tuple[str, ...] = ()
    count = None
    if hosts is not None:
        if hosts.strip().isdigit():
            count = int(hosts)
            if not 1 <= count <= MAX_RANKS:
                fail(f"--hosts {hosts}: expected a count in 1..{MAX_RANKS} or host names")
        else:
            names = tuple(h.strip() for h in hosts.split(","))
            if not all(names) or len(set(names)) != len(names) or len(names) > MAX_RANKS:
                fail(f"--hosts {hosts!r}: expected distinct host names separated by commas, or a count")
    if gpu is not None and not gpu.strip():
        fail("--gpu: expected a GPU model name")
    given = GivenFacts(ranks=ranks, hosts=names, nhosts=count, gpu=gpu.strip() if gpu else None)
    return given or None


def _directory_runs(
    path: Path, fmt: str, tag: str | None, revision: str | None, started_at: str | None, max_bytes: int
) -> tuple[str, list[Any]]:
    """The run of a directory: only NCCL Inspector's output comes as one (a file per process)."""
    from commlens.ingest.base import IngestError
    from commlens.ingest.nccl_inspector import NAME, load_dump_runs

    if fmt not in ("auto", NAME):
        raise IngestError(path, 0, f"a directory, read only as {NAME} output (not --format {fmt})")
    runs = load_dump_runs(path, tag=tag, revision=revision, started_at=started_at, max_bytes=max_bytes)
    return NAME, runs


def _summary(path: Path, fmt: str, run: Any) -> str:
    ops = ",".join(dict.fromkeys(m.op for m in run.measurements))
    status = "" if run.status == "complete" else f"; {run.status}"
    return (
        f"{path}: stored run {run.run_id} ({fmt}; {ops}; {len(run.measurements)} measurements; "
        f"{run.world_size} ranks{status})"
    )
