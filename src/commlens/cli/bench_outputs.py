"""Where a finished benchmark run goes, checked before the ranks start and never lost when a write fails at the end.

``check_destinations`` refuses, before any measurement, a ``--json`` path that is a directory or sits on
a read-only or full file system, a result store that cannot take a write, and a tag or revision that is
not valid text. ``save_outputs`` writes every destination; if one still fails (the disk filled, the
database went read-only during the sweep), the whole run is kept in ``unsaved/RUN_ID.json`` under the
user's data directory and ``SaveError`` names that file.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from commlens.bench.config import ConfigError
from commlens.files import user_data_dir
from commlens.results.jsonfmt import run_to_dict, write_json
from commlens.results.records import Run

__all__ = [
    "Destinations",
    "Outputs",
    "exit_code",
    "MIN_FREE_BYTES",
    "SaveError",
    "check_destinations",
    "check_file_destination",
    "save_outputs",
    "unsaved_dir",
]

# Below this much free space a run's JSON file is likely not to fit (a sweep's file is tens of KB to MBs).
MIN_FREE_BYTES = 1 << 20


class SaveError(RuntimeError):
    """A destination of a finished run failed; ``fallback`` holds the whole run (None if even that failed)."""

    def __init__(self, message: str, fallback: Path | None):
        super().__init__(message)
        self.fallback = fallback


def unsaved_dir() -> Path:
    """``$XDG_DATA_HOME/commlens/unsaved`` (default ``~/.local/share/commlens/unsaved``)."""
    return user_data_dir() / "unsaved"


def _check_text(option: str, value: str | None) -> None:
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{option} is not valid UTF-8 text: {os.fsencode(value)!r}") from None


def check_file_destination(option: str, location: str) -> None:
    """The file can be written atomically: not a directory, its directory takes a new file and has room."""
    path = Path(location).expanduser()
    if path.is_dir():
        raise ConfigError(f"{option} {location}: is a directory; give a file name")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:  # write_json creates missing directories
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{option} {location}: {parent} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".commlens-probe-")
        os.close(fd)
        os.unlink(probe)
        fs = os.statvfs(parent)
        free_bytes = fs.f_bavail * fs.f_frsize
    except OSError as e:
        raise ConfigError(f"{option} {location}: cannot write in {parent}: {e.strerror}") from None
    if free_bytes < MIN_FREE_BYTES:
        raise ConfigError(
            f"{option} {location}: no space left in {parent} ({free_bytes} B free, need {MIN_FREE_BYTES} B)"
        )


def _check_store(location: str | None) -> None:
    from commlens.store import StoreError, preflight

    try:
        preflight(location)
    except StoreError as e:
        raise ConfigError(f"--db: {e}") from None


@dataclass(frozen=True)
class Destinations:
    """Where a finished run goes: the JSON files asked for and the result store (``db``; None: the default)."""

    json_path: str | None = None
    nccl_json_path: str | None = None
    db: str | None = None
    store: bool = True
    tag: str | None = None
    revision: str | None = None

    @classmethod
    def of(cls, ns: argparse.Namespace) -> Destinations:
        """From ``commlens bench``'s parsed options."""
        return cls(ns.json_path, ns.nccl_json_path, ns.db, not ns.no_store, ns.tag, ns.revision)


def check_destinations(to: Destinations) -> None:
    """Raise ConfigError, before anything runs, for an output or store the run could not be saved to."""
    _check_text("--tag", to.tag)
    _check_text("--revision", to.revision)
    for option, location in (("--json", to.json_path), ("--nccl-tests-json", to.nccl_json_path)):
        if location is not None and location != "-":
            check_file_destination(option, location)
    if to.store:
        _check_store(to.db)


def _keep(run: Run) -> Path | None:
    """Write the whole run to the unsaved directory; None if that fails too."""
    path = unsaved_dir() / f"{run.run_id}.json"
    try:
        write_json(path, run_to_dict(run))
    except OSError:
        return None
    return path


def save_outputs(run: Run, to: Destinations, say: Callable[[str], None]) -> None:
    """Write the JSON files asked for and store the run (unless --no-store); every destination is tried.

    Raises SaveError naming what failed and the fallback file that keeps the run.
    """
    failed: list[str] = []

    def attempt(what: str, write: Callable[[], None]) -> None:
        try:
            write()
        except Exception as e:  # noqa: BLE001 - any failure here must not lose the run; it is reported below
            failed.append(f"{what}: {e}")

    json_path, nccl_json_path = to.json_path, to.nccl_json_path
    if json_path:
        attempt(f"--json {json_path}", lambda: write_json(json_path, run_to_dict(run)))
    if nccl_json_path:
        from commlens.results.nccltests_json import run_to_nccl_tests_json

        attempt(f"--nccl-tests-json {nccl_json_path}", lambda: write_json(nccl_json_path, run_to_nccl_tests_json(run)))
    if to.store:

        def store() -> None:
            from commlens.store import Store

            with Store.open(to.db) as db:
                db.save_run(run)
                say(f"# stored run {run.run_id} ({run.status}, {len(run.measurements)} rows) in {db.url}")

        attempt("result store", store)
    if not failed:
        return
    fallback = _keep(run)
    kept = f"the run is kept in {fallback}" if fallback else f"the run could not be kept either (in {unsaved_dir()})"
    raise SaveError(f"saving run {run.run_id} failed: {'; '.join(failed)}; {kept}", fallback)


def exit_code(run: Run, wrong: Sequence[str], say: Callable[[str], None]) -> int:
    """1 when any element was wrong, 130 for an interrupted run, else 0."""
    for msg in wrong:
        say(f"error: wrong results: {msg}")
    if wrong:
        return 1
    return 130 if run.status == "incomplete" else 0


class Outputs:
    """Rank 0's outputs under an external launcher (``torchrun ... -m commlens.bench``): the worker's
    ``StandaloneOutputs``, with messages on stderr."""

    def check(self, ns: argparse.Namespace) -> None:
        check_destinations(Destinations.of(ns))

    def finish(self, run: Run, wrong: list[str], ns: argparse.Namespace) -> int:
        def say(text: str) -> None:
            print(text, file=sys.stderr)

        try:
            save_outputs(run, Destinations.of(ns), say)
        except SaveError as e:
            say(f"error: {e}")
            return 1
        return exit_code(run, wrong, say)
