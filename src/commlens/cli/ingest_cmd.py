"""commlens ingest FILE...: read other tools' outputs (the formats of ``commlens.ingest``) into the store."""

from __future__ import annotations

import contextlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import typer

from commlens.cli.app import app, fail, say
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB
from commlens.cli.text import terminal_safe
from commlens.ingest.registry import FORMATS

if TYPE_CHECKING:
    from commlens.results.jsonvalue import JsonObject

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
    from commlens.cli.expect_cmd import check_fail_below
    from commlens.ingest import parse_time
    from commlens.store import db_url, default_db_url
    from commlens.store.db import parse_url

    if fmt != "auto" and fmt not in FORMATS:
        fail(f"--format {fmt!r}: expected auto, {', '.join(FORMATS)}")
    if not max_input_mib > 0 or max_input_mib == float("inf"):  # also refuses NaN
        fail(f"--max-input-mib {max_input_mib}: expected a number of MiB > 0")
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
    reading = _Reading(fmt, tag, revision, started_at, op, _given(ranks, hosts, gpu), int(max_input_mib * 2**20))
    with errors_as_exit():
        url = db_url(db) if db is not None else default_db_url()
        parse_url(url)  # a malformed --db is an error before any file is read
    check_fail_below(fail_below)
    out = _Outcome()
    batch = _store_files(files, reading, url, fail_below, as_json, out)
    _finish(out, batch, as_json, fail_below)


@dataclass(frozen=True)
class _Reading:
    """How every file of one ``ingest`` is read (its options, checked)."""

    fmt: str
    tag: str | None
    revision: str | None
    started_at: str | None
    op: str | None
    given: Any
    max_bytes: int


class _Entry(TypedDict):
    """One run in ``ingest --json``'s list."""

    file: str
    format: str
    stored: bool  # False: the same content was stored before
    run: JsonObject
    expect: JsonObject | None


@dataclass
class _Outcome:
    """What one ``ingest`` has to say once every file is committed."""

    failed: int = 0
    below: list[str] = field(default_factory=list)  # runs stored now that --fail-below fails
    ingested: list[_Entry] = field(default_factory=list)  # --json entries
    printed: list[tuple[str, str]] = field(default_factory=list)  # (file, line): what is stored


def _store_files(
    files: list[Path], reading: _Reading, url: str, fail_below: float | None, as_json: bool, out: _Outcome
) -> Any:
    """Read, judge and store each file; the batch they went into (None if no file got that far).

    The store is opened at the first run to save: an ingest that refuses every file creates no store file.
    Every file's runs go into one transaction (a savepoint each: a file the store refuses leaves the
    others), committed at the end: a database fault, or Ctrl-C, stores nothing of any file."""
    from commlens.cli.expect_cmd import judge_or_none, with_kept_verdict
    from commlens.store import Store, StoreError
    from commlens.store.db import DatabaseFault
    from commlens.store.repo import RunBatch

    batch: RunBatch | None = None
    with errors_as_exit(), contextlib.ExitStack() as closing:
        for path in files:
            read = _read_file(path, reading)
            if read is None:
                out.failed += 1
                continue
            used, runs = read
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
                out.failed += 1
                continue
            for run in runs:
                _report_run(path, used, run, run.run_id not in stored, verdicts[run.run_id], fail_below, as_json, out)
    return batch


def _read_file(path: Path, reading: _Reading) -> tuple[str, list[Any]] | None:
    """The format and runs of one file or dump directory, read once (a pipe can be read only once: detected,
    parsed and hashed from memory); None after saying why it cannot be read. Its warnings are said."""
    from commlens.errors import CommlensError
    from commlens.expect import with_log_facts
    from commlens.ingest import IngestWarning, load_source_runs, read_source

    r = reading
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IngestWarning)
        try:
            if path.is_dir():  # a dump directory of per-process files: NCCL Inspector's
                return _directory_runs(path, r.fmt, r.tag, r.revision, r.started_at, r.max_bytes)
            source = read_source(path, max_bytes=r.max_bytes)
            used, runs = load_source_runs(
                source, tag=r.tag, revision=r.revision, started_at=r.started_at, fmt=r.fmt, op=r.op, given=r.given
            )
            if used == "nccl-tests":  # its NCCL INFO lines, kept for expect (a text log: one run)
                runs = [with_log_facts(run, source.text) for run in runs]
            return used, runs
        except CommlensError as e:
            say("error", str(e))
            return None
        finally:
            for w in caught:
                if issubclass(w.category, IngestWarning):
                    say("warning", str(w.message))


def _report_run(
    path: Path, used: str, run: Any, is_new: bool, verdict: Any, fail_below: float | None, as_json: bool, out: _Outcome
) -> None:
    """What is said of one run of a file just saved: warnings now, its summary or JSON entry once committed."""
    from commlens.cli.expect_cmd import below_by_more_than, summary_lines
    from commlens.results.jsonfmt import run_to_dict

    if is_new and run.status == "check_failed":
        for note in run.notes:
            if note.startswith("results check failed"):
                say(
                    "warning",
                    f"{path}: {note} (compare does not judge its failed rows; detect leaves the run out of history)",
                )
    if not is_new:
        say("", f"{path}: already stored as run {run.run_id} (same content); skipped")
    if is_new and verdict is not None and below_by_more_than(verdict.status, verdict.pct, fail_below):
        out.below.append(f"run {run.run_id[:12]} ({path}) is below expectation by {verdict.pct:.0f}%")
    if as_json:
        expect = verdict.as_dict() if verdict is not None else None
        out.ingested.append(
            {"file": str(path), "format": used, "stored": is_new, "run": run_to_dict(run), "expect": expect}
        )
    elif is_new:
        out.printed.append((str(path), terminal_safe(_summary(path, used, run))))
        if verdict is not None:
            lines = summary_lines(verdict, causes=1, ranges=False)
            out.printed += [(str(path), terminal_safe(line)) for line in lines]


def _finish(out: _Outcome, batch: Any, as_json: bool, fail_below: float | None) -> None:
    """Say what was stored (leaving out the files the store refused at commit), then exit as the outcome says:
    2 when a file failed, 1 when a run stored now is below --fail-below."""
    refused_files = batch.refused if batch is not None else []
    refused = {label for label, _ in refused_files}
    for label, error in refused_files:
        say("error", f"{label}: {error}")
        out.failed += 1
    shown = [line for label, line in out.printed if label not in refused]
    if shown:
        print("\n".join(shown))
    if as_json:
        print(json.dumps([entry for entry in out.ingested if entry["file"] not in refused], indent=1))
    if out.failed:
        raise typer.Exit(2)
    if out.below:
        for line in out.below:
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
