"""Run references on the command line: the library's resolver (``commlens.store.refs``), its errors as ``error:``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commlens.cli.errors import errors_as_exit

if TYPE_CHECKING:
    from commlens.results.records import Run


def load_file_or_fail(path: str) -> list[Run]:
    """The runs in a result file (commlens JSON, nccl-tests, PARAM); an unreadable one is ``error: PATH: ...``."""
    from commlens import ingest

    with errors_as_exit(f"{path}: "):
        return list(ingest.run(ingest.IngestRequest(path)))


def runs_named(refs: list[str], db: str | None, *, create: bool = True) -> list[Run]:
    """Every run the references name, in order; the store is opened only if one is not a file."""
    from commlens.store.refs import StoreOnDemand, resolve_runs

    with errors_as_exit(), StoreOnDemand(db, create=create) as store:
        return [run for ref in refs for run in resolve_runs(ref, store, load_file_or_fail)]


def run_named(ref: str, db: str | None) -> Run:
    """The one run ``ref`` names, read from the store (never created) or a file."""
    from commlens.store.refs import StoreOnDemand, resolve_run

    with errors_as_exit(), StoreOnDemand(db, create=False) as store:
        return resolve_run(ref, store, load_file_or_fail)
