"""Every command's usage-error path, run through the installed ``commlens`` script: one ``error: ...`` line,
exit code 2, never a traceback or a box (issue 11: typer 0.29 no longer ships click, and
``commlens project --bogus`` died on ``import click``)."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import typer
from benchutil import commlens

from commlens.cli.app import _register, app

_register()


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands:
        return [leaf for name, sub in sorted(subcommands.items()) for leaf in _leaves(sub, (*path, name))]
    return [(path, command)]


_LEAVES = _leaves(typer.main.get_command(app))
_PATHS = [path for path, _ in _LEAVES]
_NUMBER_OPTIONS = {
    path: opt
    for path, command in _LEAVES
    for opt in [
        next(
            (
                p.opts[0]
                for p in command.params
                if getattr(p, "opts", None)
                and p.opts[0].startswith("--")
                and getattr(getattr(p, "type_descriptor", None), "annotation", None) in (int, float)
            ),
            None,
        )
    ]
    if opt is not None
}
_REQUIRED = {path for path, command in _LEAVES if any(getattr(p, "required", False) for p in command.params)}


def _cases() -> dict[tuple[str, ...], tuple[str, ...]]:
    cases: dict[tuple[str, ...], tuple[str, ...]] = {}
    for path in _PATHS:
        cases[("unknown-option", *path)] = (*path, "--no-such-option")
    for path, opt in _NUMBER_OPTIONS.items():
        cases[("bad-number", *path)] = (*path, opt, "not-a-number")
    for path in sorted(_REQUIRED):
        cases[("missing-argument", *path)] = path
    # Behind their own parser (argparse for bench), or without a sub-command name (`project WORKLOAD`).
    cases[("bad-number", "bench")] = ("bench", "--iters", "not-a-number")
    cases[("bad-number", "project")] = ("project", "llama3-8b", "-t", "dgx-h100", "--gpus", "not-a-number")
    cases[("bad-number", "project", "sweep")] = ("project", "sweep", "llama3-8b", "--gpus", "not-a-number")
    cases[("missing-argument", "project")] = ("project",)
    return cases


_CASES = dict(sorted(_cases().items()))  # sorted: every pytest process (xdist workers) collects one order


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Every case run once, a few at a time (each is a fresh process of the installed script)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = pool.map(lambda argv: commlens(*argv, timeout=60), _CASES.values())
        return dict(zip(_CASES, procs))


def test_every_command_is_covered() -> None:
    """The walk finds the whole command tree, so a new command gets its usage checks without a new test."""
    tops = {path[0] for path in _PATHS}
    assert {
        "bench",
        "ingest",
        "compare",
        "detect",
        "project",
        "tune",
        "runs",
        "cluster",
        "diagnose",
        "model",
        "topology",
        "db",
        "show",
        "export",
    } <= tops
    assert {
        ("project", "sweep"),
        ("project", "validate"),
        ("project", "calibrate"),
        ("cluster", "down"),
        ("diagnose", "hang"),
        ("diagnose", "stragglers"),
        ("model", "predict"),
    } <= set(_PATHS)
    assert len(_NUMBER_OPTIONS) >= 10 and len(_REQUIRED) >= 10


@pytest.mark.parametrize("case", list(_CASES), ids=["-".join(c) for c in _CASES])
def test_usage_error_is_a_message_and_exit_2(outcomes, case) -> None:
    proc = outcomes[case]
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    text = proc.stderr
    kind = case[0]
    # one convention for every command (issue 29): one `error: ...` line naming the problem and where help is,
    # whichever parser found it (Typer's, argparse's for bench, or commlens' own checks); never a box
    assert text.startswith("error: "), text
    assert not any(box in text for box in "╭╰│"), text
    assert "Usage:" not in text and "usage:" not in text, text
    lowered = text.lower()
    if kind == "unknown-option":
        assert "--no-such-option" in text and ("no such option" in lowered or "unrecognized arguments" in lowered)
    elif kind == "bad-number":
        assert "not-a-number" in text or "invalid value" in lowered, text
    else:
        assert "missing" in lowered or "give" in lowered or "expected" in lowered, text
    assert "--help'" in text, text


def test_terminal_controls_in_an_error_are_escaped(tmp_path) -> None:
    """A file name (or any text from outside) that holds terminal controls cannot drive the terminal through
    an error line: ``ingest`` and ``fail()`` print it escaped."""
    evil = tmp_path / "x\x1b]0;pwned\x07"
    proc = commlens("ingest", "--db", str(tmp_path / "r.db"), str(evil))
    assert proc.returncode == 2
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert "x\\x1b]0;pwned\\x07: cannot read" in proc.stderr, proc.stderr
    proc = commlens("cluster", "down", "a\x1bb")
    assert proc.returncode == 2 and "\x1b" not in proc.stderr and "'a\\x1bb'" in proc.stderr, proc.stderr
