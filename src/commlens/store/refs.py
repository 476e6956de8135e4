"""Run references: what ``commlens compare``, ``model fit``/``check``, ``diagnose``, ``show`` and ``export``
accept as "a run".

A reference is a file (read by the ``load_file`` the caller passes, so that the store
need not know the input formats), a tag (every stored run with it, oldest first) or a
run id or unique prefix. ``run:``, ``tag:`` or ``file:`` in front says which; without it
an existing file wins, then a tag with runs, then a run id. A reference that is not a
file but ends like one (``.json``, ``.txt``, ...) is a missing file, not a tag or an id.

:func:`resolve_runs` gives the runs themselves; :func:`resolve_run_ids` the ids of stored runs, for the
commands that act on the store (``show``, ``export``), where a file is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from commlens.results.records import Run
from commlens.store.db import StoreError

if TYPE_CHECKING:  # opened on first use (StoreOnDemand): resolving a file reference loads no ORM
    from commlens.store.repo import Store

RefKind = Literal["run", "tag", "file"]
REF_KINDS: tuple[RefKind, ...] = ("run", "tag", "file")
BASELINE_REFS = ("baseline", "baseline:")  # the base reference that means "the candidate's series' baseline"
# A reference that does not exist but ends like this is taken as a missing file, not a tag or run id.
FILE_SUFFIXES = (".json", ".txt", ".log", ".out", ".csv")


def is_baseline_ref(ref: str) -> bool:
    """Whether ``ref`` is compare's ``baseline`` (the candidate's series' stored baseline), not a run."""
    return ref in BASELINE_REFS


class RunRefError(StoreError):
    """A reference that names no run. ``labelled(what)`` is the message with the role of the reference first."""

    _joiner = ": "

    def labelled(self, what: str) -> str:
        """``base: no run has tag ...``, ``base 'x.json': no such file``: the message, said of ``what``."""
        return f"{what}{self._joiner}{self}"


class MissingFileError(RunRefError):
    """A reference that looks like a file (by its suffix) and is none."""

    _joiner = " "

    def __init__(self, ref: str) -> None:
        super().__init__(f"{ref!r}: no such file")
        self.ref = ref


class UnknownTagError(RunRefError):
    """``tag:NAME`` where no stored run has the tag."""

    def __init__(self, tag: str, url: str) -> None:
        super().__init__(f"no run has tag {tag!r} in {url}")
        self.tag = tag


class UnknownRunError(RunRefError):
    """``run:ID`` that the store cannot give: no match, several, or unreadable (its reason is the message)."""

    def __init__(self, run_ref: str, cause: StoreError) -> None:
        super().__init__(str(cause))
        self.run_ref = run_ref


class UnknownRefError(RunRefError):
    """A bare reference that is no file, no tag with runs and no run id."""

    _joiner = " "

    def __init__(self, ref: str, url: str, cause: StoreError) -> None:
        super().__init__(f"{ref!r} is not a file, a tag or a run id in {url}: {cause}")
        self.ref = ref


class StoreOnDemand:
    """Opens the result store at ``url`` on the first call only (a resolver's ``store``), closed with ``with``."""

    def __init__(self, url: str | None, *, create: bool = True) -> None:
        self.url = url
        self.create = create
        self.store: Store | None = None

    def __call__(self) -> Store:
        if self.store is None:
            from commlens.store.repo import Store

            self.store = Store.open(self.url, create=self.create)
        return self.store

    def __enter__(self) -> StoreOnDemand:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


@dataclass(frozen=True)
class RunRef:
    """A parsed reference: ``kind`` is None when the text did not say which."""

    kind: RefKind | None
    text: str

    @classmethod
    def parse(cls, ref: str) -> RunRef:
        kind, sep, rest = ref.partition(":")
        if sep and kind in REF_KINDS:
            return cls(kind, rest)
        return cls(None, ref)


def resolve_runs(ref: str, store: Callable[[], Store], load_file: Callable[[str], list[Run]]) -> list[Run]:
    """The runs ``ref`` names, in the order of the module's docstring.

    ``store`` opens (or returns) the result store; it is called only when the reference
    is not a file, so comparing two files touches no database. ``load_file`` reads a
    file's runs; its errors pass through unchanged. Raises a :class:`RunRefError`
    when nothing matches, or the store's own error when it cannot be read.
    """
    parsed = RunRef.parse(ref)
    kind, text = parsed.kind, parsed.text
    if kind == "file" or (kind is None and Path(text).is_file()):
        return load_file(text)
    if kind is None and text.lower().endswith(FILE_SUFFIXES):
        raise MissingFileError(ref)
    if kind in (None, "tag"):
        runs = store().runs_with_tag(text)
        if runs:
            return runs
        if kind == "tag":
            raise UnknownTagError(text, store().url)
    try:
        return [store().get_run(text)]
    except StoreError as e:  # unknown or ambiguous, or unreadable: the store's reason goes along
        if kind == "run":
            raise UnknownRunError(text, e) from e
        raise UnknownRefError(ref, store().url, e) from e


class NotOneRunError(RunRefError):
    """A reference where one run is wanted that names several (a tag, a file of many runs)."""

    _joiner = " "

    def __init__(self, ref: str, count: int) -> None:
        super().__init__(f"{ref!r} names {count} runs; give one (a run id, or a file of one run)")
        self.ref = ref
        self.count = count


def resolve_run(ref: str, store: Callable[[], Store], load_file: Callable[[str], list[Run]]) -> Run:
    """The one run ``ref`` names, as :func:`resolve_runs`; :class:`NotOneRunError` when it names several."""
    runs = resolve_runs(ref, store, load_file)
    if len(runs) != 1:
        raise NotOneRunError(ref, len(runs))
    return runs[0]


class NotStoredError(RunRefError):
    """A file given where a stored run is wanted."""

    _joiner = " "

    def __init__(self, ref: str) -> None:
        super().__init__(f"{ref!r} is a file, not a stored run (`commlens ingest` stores it)")
        self.ref = ref


def resolve_run_ids(ref: str, store: Store) -> list[str]:
    """The ids of the stored runs ``ref`` names: ``tag:NAME`` or a tag with runs (oldest first), else a run id
    or unique prefix (``run:`` says so). The store's own error when no run matches; :class:`NotStoredError`
    for a file, :class:`UnknownTagError` for ``tag:NAME`` with no run."""
    parsed = RunRef.parse(ref)
    kind, text = parsed.kind, parsed.text
    if kind == "file" or (kind is None and Path(text).is_file()):
        raise NotStoredError(ref)
    if kind in (None, "tag"):
        tagged = store.run_ids_with_tag(text)
        if tagged:
            return tagged
        if kind == "tag":
            raise UnknownTagError(text, store.url)
    return [store.resolve(text)]
