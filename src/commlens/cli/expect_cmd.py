"""commlens expect RUN|FILE: is this bandwidth normal? The verdict, the system it assumed, the likely causes.

Also the short verdict lines that ``ingest``, ``show`` and ``bench`` print at the end of a run.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import typer

from commlens.cli.app import app, fail, say
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB
from commlens.cli.text import terminal_safe

if TYPE_CHECKING:
    from commlens.expect import RunVerdict
    from commlens.results.jsonvalue import JsonObject
    from commlens.results.records import Run
    from commlens.topology import Topology


def _gbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.2f}"


def _size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B" if n < 1024 else f"{n / 1024:.0f}K"


def summary_lines(v: RunVerdict, *, causes: int = 2, ranges: bool = True) -> list[str]:
    """A few ``# expect:`` lines: the verdict (per size range with ``ranges``) and the top causes (for ingest,
    show, bench)."""
    lines = [f"# expect: {v.headline()}"]
    for r in v.ranges if ranges else ():
        state = {"normal": "normal", "below": f"below by {r.pct:.0f}%", "above": f"above by {r.pct:.0f}%"}[r.status]
        lines.append(
            f"#   {r.op} {_size(r.min_size_bytes)}-{_size(r.max_size_bytes)} ({r.kind}): {state}, "
            f"{r.ratio:.0%} of the model; limit {r.limit}"
        )
    for i, c in enumerate(v.causes[:causes], 1):
        evidence = f" [{c.evidence[0]}]" if c.evidence else ""
        lines.append(f"#   likely cause {i}: {c.title}{evidence}")
    lines.append(f"#   model: {v.system.topology.name}; details: commlens expect {v.run_id[:12]}")
    return lines


def verdict_lines(v: RunVerdict) -> list[str]:
    """The full report of ``commlens expect``."""
    s = v.system
    out = [f"run {v.run_id[:12]}: {v.headline()}", "", "system (inferred):"]
    out += [f"  {n.what}: {n.value}    <- {n.source}" for n in s.inferred]
    if s.assumed:
        out.append("assumed (not in the log):")
        out += [f"  {n.what}: {n.value}    <- {n.source}" for n in s.assumed]
    out += ["", "size ranges:"]
    for r in v.ranges:
        words = {"normal": "normal", "below": f"below expectation by {r.pct:.0f}%", "above": f"above by {r.pct:.0f}%"}
        out.append(
            f"  {r.op:<15} {_size(r.min_size_bytes):>6} - {_size(r.max_size_bytes):<6} {r.kind:<16} "
            f"{words[r.status]:<32} {r.ratio:>5.0%} of model   limit: {r.limit}"
        )
    out += ["", f"  {'op':<15} {'size':>8} {'busBW':>9} {'band (GB/s)':>17} {'model':>8}  {'verdict':<14} algorithms"]
    for row in v.rows:
        e = row.expected
        band = f"{_gbps(e.lower_bytes_per_s)}-{_gbps(e.upper_bytes_per_s)}"
        state = row.status if row.status == "normal" else f"{row.status} {row.pct:.0f}%"
        out.append(
            f"  {row.op:<15} {_size(row.size_bytes):>8} {_gbps(row.busbw_bytes_per_s):>9} {band:>17} "
            f"{_gbps(e.model_bytes_per_s):>8}  {state:<14} {','.join(e.algos)}"
        )
    if v.causes:
        out += ["", "likely causes, most likely first:"]
        for i, c in enumerate(v.causes, 1):
            out.append(f"  {i}. {c.title}")
            out += [f"     evidence: {e}" for e in c.evidence]
            out.append(f"     try: {c.try_}")
            out.append(f"     source: {c.source}")
    elif v.status == "below":
        out += ["", "no known cause matches what the log shows (run with NCCL_DEBUG=INFO for more evidence)"]
    return out


# -- the verdict kept with a stored run ---------------------------------------------------------------
#
# Judging a run imports the model and topology stack (pydantic included) and reads a preset: ~100-200 ms of CPU
# in a fresh process, most of what `show` would spend on it. So `ingest` and `bench`, which judge the run
# anyway, keep the verdict's summary with the run (system.extra, outside its fingerprint), stamped with the
# version of the model that produced it: a hash of the expect tables and the model, topology and expect code.
# `show` prints the kept summary when the stamp matches the installed model, and judges again only when it does
# not (another commlens version, edited tables) or when the run has none (stored before, or by `commlens run`).
# The price: a kept verdict is as of the model that judged it, which the stamp makes the installed one.

VERDICT_KEY = "expect_verdict"
_MODEL_FILES = ("expect", "model", "topology")  # packages (their .py and table files) whose code sets a verdict


@functools.cache
def model_stamp() -> str:
    """A short hash of everything a verdict depends on besides the run: the code and tables of
    ``commlens.expect``, ``commlens.model`` and ``commlens.topology`` (presets included)."""
    import hashlib  # not at import time: every command imports this module, --help included (~20-50 ms)

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(b"commlens-expect-verdict/1")
    for package in _MODEL_FILES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix in (".py", ".yaml", ".yml", ".json") and path.is_file():
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class KeptVerdict:
    """A run's verdict as kept in its ``system.extra`` (``status`` None: kept as not judged)."""

    stamp: str  # the model_stamp() that made it: another model's verdict is judged again
    status: str | None
    pct: float = 0.0
    lines: tuple[str, ...] = ()  # the summary lines `show` and `ingest` print
    short: tuple[str, ...] = ()

    def as_dict(self) -> JsonObject:
        if self.status is None:
            return {"stamp": self.stamp, "status": None}
        return {
            "stamp": self.stamp,
            "status": self.status,
            "pct": self.pct,
            "lines": list(self.lines),
            "short": list(self.short),
        }


def kept_verdict(v: RunVerdict) -> KeptVerdict:
    """What is kept with a run: the stamp, status, shortfall and the summary lines `show` and `ingest` print."""
    lines, short = summary_lines(v), summary_lines(v, causes=1, ranges=False)
    return KeptVerdict(model_stamp(), v.status, round(v.pct, 2), tuple(lines), tuple(short))


def with_kept_verdict(run: Run, v: RunVerdict | None) -> Run:
    """``run`` with ``v`` kept in ``system.extra`` (``None``: kept as not judged, so `show` need not try again)."""
    kept = kept_verdict(v) if v is not None else KeptVerdict(model_stamp(), None)
    system = dataclasses.replace(run.system, extra={**run.system.extra, VERDICT_KEY: kept.as_dict()})
    return dataclasses.replace(run, system=system)


def current_kept(run: Run) -> KeptVerdict | None:
    """The verdict kept with ``run`` if the installed model made it (``status`` None: the run was not judged)."""
    kept = run.system.extra.get(VERDICT_KEY)
    if not isinstance(kept, dict) or kept.get("stamp") != model_stamp():
        return None
    status, pct, lines, short = kept.get("status"), kept.get("pct"), kept.get("lines"), kept.get("short")
    if status is None:
        return KeptVerdict(model_stamp(), None)
    if status not in ("normal", "below", "above") or not isinstance(pct, int | float):
        return None  # a store edited by hand, or by another tool: judged again
    if not (_strings(lines) and _strings(short)):
        return None
    return KeptVerdict(model_stamp(), status, pct, tuple(lines), tuple(short))


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


def summary_for(run: Run) -> list[str]:
    """The ``# expect:`` lines of ``show``: those kept with the run when current, else judged now."""
    kept = current_kept(run)
    if kept is not None:
        return list(kept.lines)
    verdict = judge_or_none(run)
    return summary_lines(verdict) if verdict is not None else []


def below_by_more_than(status: str | None, pct: float, limit: float | None) -> bool:
    """Whether ``--fail-below limit`` fails a run of this verdict."""
    return limit is not None and status == "below" and pct > limit


def check_fail_below(limit: float | None) -> None:
    """``--fail-below PCT`` checked (exit 2 when out of range)."""
    if limit is not None and not 0 <= limit < 100:
        fail(f"--fail-below {limit}: expected a percentage from 0 to 100")


def judge_or_none(run: Run, log_text: str | None = None) -> RunVerdict | None:
    """The verdict, or None when the run cannot be judged (no GPU known, no row modelled, wrong results): for
    summaries."""
    from commlens import expect

    if run.status == "check_failed":  # rows with wrong results say nothing about bandwidth
        return None
    try:
        return expect.run(expect.ExpectRequest(run, log_text))
    except expect.ExpectError:
        return None


def _load_topology(name: str | None) -> Topology | None:
    if name is None:
        return None
    from commlens.topology import load_topology

    with errors_as_exit("--topology: "):
        return load_topology(name)


def _runs(ref: str, db: str | None, op: str | None) -> list[tuple[Run, str | None]]:
    """The runs of a file (with its text, for the NCCL INFO lines) or the stored run ``ref`` names."""
    from commlens.cli.run_refs import run_named

    path = Path(ref)
    if path.is_file():
        from commlens.ingest import load_source_runs, read_source

        with errors_as_exit(f"{ref}: "):
            source = read_source(path)
            _, runs = load_source_runs(source, op=op)
        return [(run, source.text) for run in runs]
    return [(run_named(ref, db), None)]


@app.command("expect")
def expect_cmd(
    run: str = typer.Argument(..., help="a stored run (id, prefix, tag:NAME) or a result file (nccl-tests log, ...)"),
    topology: str | None = typer.Option(
        None, "--topology", "-t", help="judge on this topology (preset or file) instead of the one inferred"
    ),
    fail_below: float | None = typer.Option(
        None, "--fail-below", metavar="PCT", help="exit 1 when the run is below its expectation by more than PCT %"
    ),
    nics: int | None = typer.Option(None, "--nics", help="NICs per node, where the log does not list them"),
    nic_gbps: float | None = typer.Option(
        None, "--nic-gbps", help="line rate of one NIC in Gb/s, where the log does not show it"
    ),
    op: str | None = typer.Option(None, help="the collective of an nccl-tests log that does not name it"),
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print the verdict as JSON"),
) -> None:
    """Is this bandwidth normal? The run's expected busBW band, its verdict per size range, likely causes."""
    from commlens import expect

    check_fail_below(fail_below)
    topo = _load_topology(topology)
    with errors_as_exit():
        given = tuple(expect.given_facts(nics=nics, nic_gbps=nic_gbps))
    verdicts: list[RunVerdict] = []
    for found, text in _runs(run, db, op):
        with errors_as_exit():
            verdicts.append(expect.run(expect.ExpectRequest(found, text, topo, given)))
    if as_json:
        docs = [v.as_dict() for v in verdicts]
        print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=1))
    else:
        for i, v in enumerate(verdicts):
            if i:
                print()
            print("\n".join(terminal_safe(line) for line in verdict_lines(v)))
    if fail_below is not None:
        failed = [v for v in verdicts if below_by_more_than(v.status, v.pct, fail_below)]
        if failed:
            for v in failed:
                say("error", f"run {v.run_id[:12]} is below expectation by {v.pct:.0f}% (more than {fail_below:g}%)")
            raise typer.Exit(1)
