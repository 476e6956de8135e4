"""``commlens baseline`` and ``commlens threshold``: a series' stored baseline, and per-series thresholds.

A series is one system (fingerprint) under one tag. ``compare baseline RUN`` compares a run with its
series' baseline; compare and detect judge each row with the stored threshold that matches it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import command_group, fail
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB, option_set
from commlens.cli.regress_cmd import parse_fraction
from commlens.results.text_tables import commented_table_lines

if TYPE_CHECKING:
    from collections.abc import Sequence

    from commlens.store import Store
    from commlens.store.series_meta import Baseline, Threshold

baseline_app = command_group("baseline")
threshold_app = command_group("threshold")

_JSON = typer.Option(False, "--json", help="print JSON")


def _series_tag(tag: str | None, untagged: bool, *, default: str | None = None, required: bool = False) -> str | None:
    """The series' tag from --tag / --untagged; ``default`` when neither is given (an error when ``required``)."""
    if tag is not None and untagged:
        fail("--tag and --untagged contradict each other: give one")
    if untagged:
        return None
    if tag is not None:
        if not tag.strip():
            fail("--tag must not be empty (--untagged is the series of runs without a tag)")
        return tag
    if required:
        fail("give the series' tag: --tag NAME, or --untagged for runs without a tag")
    return default


def _fingerprint(store: Store, text: str) -> str:
    with errors_as_exit("--fingerprint: "):
        return store.baselines.fingerprint(text)


# -- baseline -----------------------------------------------------------------------------------------


@baseline_app.command("set")
def baseline_set(
    ref: str = typer.Argument(..., help="the baseline: a run id (or unique prefix), run:ID, or tag:NAME"),
    fingerprint: str | None = typer.Option(
        None, help="the series' system fingerprint (or unique prefix); default: the run's, or the tag's one system"
    ),
    tag: str | None = typer.Option(None, help="the series' tag (a branch, say); default: the run's own"),
    untagged: bool = typer.Option(False, "--untagged", help="the series of runs without a tag"),
    note: str = typer.Option("", help="why this is the baseline (shown by `baseline list`)"),
    db: str | None = DB,
) -> None:
    """Make a run, or every run of a tag, the baseline of a series (one system under one tag)."""
    from commlens.store import RunFilter, Store, series_text
    from commlens.store.refs import RunRef

    parsed = RunRef.parse(ref)
    if parsed.kind == "file":
        fail(f"baseline {ref!r}: a baseline is a stored run or tag, not a file (`commlens ingest` stores it)")
    kind = "tag" if parsed.kind == "tag" else "run"
    with errors_as_exit(escape_all=True), Store.open(db, create=False) as store:
        if kind == "run":
            with errors_as_exit("baseline run: "):
                run_id = store.resolve(parsed.text)
            [summary] = store.list_runs(RunFilter(run_ids=[run_id]), limit=1)
            series_fp = summary.fingerprint if fingerprint is None else _fingerprint(store, fingerprint)
            series_tag = _series_tag(tag, untagged, default=summary.tag)
            baseline = store.baselines.set(series_fp, series_tag, "run", run_id, note)
        else:
            series_tag = _series_tag(tag, untagged, required=True)
            if fingerprint is not None:
                series_fp = _fingerprint(store, fingerprint)
            else:
                systems = store.baselines.tag_fingerprints(parsed.text)
                if len(systems) != 1:
                    fail(
                        f"tag {parsed.text!r} has runs of {len(systems)} systems"
                        + (f" ({', '.join(systems)})" if systems else "")
                        + ": give --fingerprint"
                    )
                series_fp = systems[0]
            baseline = store.baselines.set(series_fp, series_tag, "tag", parsed.text, note)
    print(f"baseline of {series_text(baseline.fingerprint, baseline.tag)}: {baseline.ref_text}")


@baseline_app.command("list")
def baseline_list(db: str | None = DB, as_json: bool = _JSON) -> None:
    """Every stored baseline, by system and tag."""
    from commlens.store import Store

    with errors_as_exit(), Store.open(db, create=False) as store:
        baselines = store.baselines.list()
    cells = [
        [b.fingerprint, "(untagged)" if b.tag is None else b.tag, b.ref_text, b.note or "-", b.set_at[:19] + "Z"]
        for b in baselines
    ]
    names = ["fingerprint", "tag", "baseline", "note", "set at (UTC)"]
    _print_listed("baselines", baselines, as_json, "`commlens baseline set RUN` sets one", names, cells)


def _print_listed(
    kind: str,
    records: Sequence[Baseline] | Sequence[Threshold],
    as_json: bool,
    hint: str,
    names: list[str],
    cells: list[list[str]],
    right: frozenset[str] = frozenset(),
) -> None:
    """``baseline list`` and ``threshold list``: ``{KIND: [...]}`` with --json, else the table (or a line saying
    there are none, and how to set one)."""
    if as_json:
        print(json.dumps({kind: [r.as_dict() for r in records]}, indent=1))
    elif not records:
        print(f"# no {kind} set ({hint})")
    else:
        print("\n".join(commented_table_lines(names, cells, right)))


@baseline_app.command("unset")
def baseline_unset(
    fingerprint: str = typer.Option(..., help="the series' system fingerprint (or unique prefix)"),
    tag: str | None = typer.Option(None, help="the series' tag"),
    untagged: bool = typer.Option(False, "--untagged", help="the series of runs without a tag"),
    db: str | None = DB,
) -> None:
    """Forget a series' baseline. Exit code 2 when it had none."""
    from commlens.store import Store, series_text

    series_tag = _series_tag(tag, untagged, required=True)
    with errors_as_exit(escape_all=True), Store.open(db, create=False) as store:
        series_fp = _fingerprint(store, fingerprint)
        removed = store.baselines.unset(series_fp, series_tag)
    if not removed:
        fail(f"no baseline is set for {series_text(series_fp, series_tag)}")
    print(f"baseline of {series_text(series_fp, series_tag)} removed")


# -- threshold ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SelectorOptions:
    """The options of ``threshold set`` and ``unset`` that name a selector; one not given matches anything."""

    fingerprint: str | None = typer.Option(None, help="only this system (fingerprint or unique prefix); default: any")
    tag: str | None = typer.Option(None, help="only runs with this tag; default: any")
    untagged: bool = typer.Option(False, "--untagged", help="only runs without a tag")
    op: str | None = typer.Option(None, help="only this op; default: any")
    dtype: str | None = typer.Option(None, help="only this dtype; default: any")
    size: str | None = typer.Option(None, help="only this message size (K/M/G suffixes); default: any")
    group: str | None = typer.Option(None, help="only rows of this process group (a live job's); default: any")
    no_group: bool = typer.Option(False, "--no-group", help="only rows without a process group (benchmark rows)")

    def threshold(self, store: Store) -> Threshold:
        """The selector the options name (settings unset)."""
        from commlens.ops import get_op
        from commlens.results.units import parse_size
        from commlens.store import ANY, ANY_SIZE, Threshold

        op, group = self.op, self.group
        if group is not None and self.no_group:
            fail("--group and --no-group contradict each other: give one")
        if group is not None and not group.strip():
            fail("--group must not be empty (--no-group matches rows without a process group)")
        if op is not None:
            with errors_as_exit("--op: "):
                op = get_op(op).name  # nccl-tests spellings too: allreduce
        with errors_as_exit("--size: "):
            size_bytes = ANY_SIZE if self.size is None else parse_size(self.size)
        return Threshold(
            fingerprint=ANY if self.fingerprint is None else _fingerprint(store, self.fingerprint),
            tag=_series_tag(self.tag, self.untagged, default=ANY),
            op=ANY if op is None else op,
            dtype=ANY if self.dtype is None else self.dtype,
            size_bytes=size_bytes,
            group=None if self.no_group else (ANY if group is None else group),
        )


@threshold_app.command("set")
@option_set("selector", _SelectorOptions)
def threshold_set(
    selector: _SelectorOptions,
    min_change: str | None = typer.Option(
        None, "--min-change", help="smallest change that counts, for compare and detect: 5% or 0.05"
    ),
    alpha: float | None = typer.Option(None, help="compare's significance level (its default 0.05)"),
    detect_alpha: float | None = typer.Option(
        None, "--detect-alpha", help="detect's significance level (its default 0.0003)"
    ),
    db: str | None = DB,
) -> None:
    """Set (or replace) the threshold of the series and rows the selector matches. The most specific stored
    threshold that sets a value wins; an explicit --min-change or --alpha of compare or detect beats it."""
    from dataclasses import replace

    from commlens.store import Store

    change = None if min_change is None else parse_fraction(min_change, "--min-change")
    with errors_as_exit(escape_all=True), Store.open(db, create=False) as store:
        chosen = selector.threshold(store)
        saved = store.thresholds.set(replace(chosen, min_change=change, alpha=alpha, detect_alpha=detect_alpha))
    print(f"threshold for {saved.selector_text()}: {_settings_text(saved)}")


@threshold_app.command("list")
def threshold_list(db: str | None = DB, as_json: bool = _JSON) -> None:
    """Every stored threshold, by selector."""
    from commlens.results.units import format_size
    from commlens.store import ANY, ANY_SIZE, Store

    with errors_as_exit(), Store.open(db, create=False) as store:
        thresholds = store.thresholds.list()

    def shown(value: str | None) -> str:
        return "(none)" if value is None else value

    cells = [
        [
            shown(t.fingerprint),
            shown(t.tag),
            t.op,
            t.dtype,
            ANY if t.size_bytes == ANY_SIZE else format_size(t.size_bytes),
            shown(t.group),
            "-" if t.min_change is None else _percent(t.min_change),
            "-" if t.alpha is None else f"{t.alpha:g}",
            "-" if t.detect_alpha is None else f"{t.detect_alpha:g}",
            t.set_at[:19] + "Z",
        ]
        for t in thresholds
    ]
    names = ["fingerprint", "tag", "op", "dtype", "size", "group", "min change", "alpha", "detect alpha", "set at"]
    right = frozenset({"size", "min change", "alpha", "detect alpha"})
    _print_listed(
        "thresholds", thresholds, as_json, "`commlens threshold set --min-change 5%` sets one", names, cells, right
    )


@threshold_app.command("unset")
@option_set("selector", _SelectorOptions)
def threshold_unset(selector: _SelectorOptions, db: str | None = DB) -> None:
    """Forget the threshold with exactly this selector. Exit code 2 when there is none."""
    from commlens.store import Store

    with errors_as_exit(escape_all=True), Store.open(db, create=False) as store:
        chosen = selector.threshold(store)
        removed = store.thresholds.unset(chosen)
    if not removed:
        fail(f"no threshold is set for {chosen.selector_text()} (`commlens threshold list` shows them)")
    print(f"threshold for {chosen.selector_text()} removed")


def _percent(fraction: float) -> str:
    """0.05 as ``5%``, 0.025 as ``2.5%``: a min change as the options take it."""
    return f"{fraction * 100:.4g}%"


def _settings_text(t: Threshold) -> str:
    parts = []
    if t.min_change is not None:
        parts.append(f"min change {_percent(t.min_change)}")
    if t.alpha is not None:
        parts.append(f"alpha {t.alpha:g}")
    if t.detect_alpha is not None:
        parts.append(f"detect alpha {t.detect_alpha:g}")
    return ", ".join(parts)
