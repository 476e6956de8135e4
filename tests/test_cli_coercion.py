"""Plain command-line values are converted without pydantic, to exactly what Typer's own conversion returns
(issue 34's start-up); every other value, and every error message, is Typer's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
from typer.models import OptionInfo

from commlens.cli.coercion import _NOT_PLAIN, plain_value

build_adapter = pytest.importorskip("typer._adapters", reason="Typer before 0.29 converts through click").build_adapter

DATA = Path(__file__).parent / "data" / "regress"


class Colour(str, Enum):
    red = "red"
    green = "green"


class Level(Enum):
    low = 1
    high = 2


VALUES = [
    "0", "-0", "-0.0", "7", "-7", "007", "+7", "1_000", " 7", "7 ", "1e3", "1.5", "-0.25", ".5", "5.", "inf", "nan", "12345678901234567890",
    "", "x", "true", "false", "yes", "0.0", "red", "RED", "green", "low", "1", "Red ",
    3, -2, 2.5, 0.0, True, False, Colour.red, Level.high,
]  # fmt: skip


@pytest.mark.parametrize("annotation", [str, int, float, bool, Colour, Level])
@pytest.mark.parametrize("case_sensitive", [True, False])
def test_a_plain_value_is_what_typers_adapter_returns(annotation: type, case_sensitive: bool) -> None:
    adapter = build_adapter(annotation, OptionInfo(case_sensitive=case_sensitive))
    plain = 0
    for value in VALUES:
        ours = plain_value(annotation, value, case_sensitive)
        if ours is _NOT_PLAIN:
            continue
        plain += 1
        theirs = adapter.validate_python(value)
        assert ours == theirs and type(ours) is type(theirs), (annotation, value, ours, theirs)
    assert plain >= 1  # each type has values converted here


def test_values_typer_would_reject_or_read_otherwise_are_left_to_typer() -> None:
    for annotation, value in [
        (int, "1e3"), (int, "x"), (int, "+7"), (int, "1_000"), (int, " 7"), (int, 2.5),
        (float, "1e3"), (float, "inf"), (float, ".5"), (float, 3), (bool, "yes"), (bool, "1"),
        (str, 3), (str, Colour.red), (Colour, "blue"), (Colour, "RED"), (Level, "3"),
    ]:  # fmt: skip
        assert plain_value(annotation, value) is _NOT_PLAIN, (annotation, value)


RUN = """
import json, sys
from commlens.cli.app import main
if sys.argv[1] == "typer":  # Typer's own conversion for every value
    import typer.core, typer._coercion
    typer.core.build_runtime_param = typer._coercion.build_runtime_param
sys.argv = ["commlens", *sys.argv[2:]]
try:
    main()
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "pydantic": "pydantic" in sys.modules}), file=sys.stderr)
"""


def _run(mode: str, *argv: str) -> tuple[str, str, dict]:
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb", "COMMLENS_DB": "/nonexistent/commlens/results.db"}
    proc = subprocess.run(
        [sys.executable, "-c", RUN, mode, *argv], env=env, capture_output=True, text=True, timeout=120
    )
    *err, last = proc.stderr.rstrip("\n").split("\n")
    return proc.stdout, "\n".join(err), json.loads(last)


def test_commands_print_and_fail_as_with_typers_conversion_without_loading_pydantic_for_plain_values() -> None:
    base, cand = f"file:{DATA / 'base-all_reduce.log'}", f"file:{DATA / 'candidate-all_reduce-10pct-slower.log'}"
    for argv, pydantic_loaded in [
        (["compare", base, cand, "--alpha", "0.01", "--min-samples", "3", "--format", "markdown"], False),
        (["compare", base, cand, "--alpha", "1e-2", "--format", "json"], True),  # "1e-2": pydantic reads it
        (["compare", base, cand, "--min-samples", "2.5"], True),
        (["compare", base, cand, "--format", "nope"], True),
    ]:
        out, err, state = _run("plain", *argv)
        typers_out, typers_err, typers_state = _run("typer", *argv)
        assert (out, err, state["code"]) == (typers_out, typers_err, typers_state["code"]), argv
        assert state["pydantic"] is pydantic_loaded and typers_state["pydantic"], argv
        if argv[-1] == "2.5":
            assert state["code"] == 2 and err.startswith(
                "error: invalid value for '--min-samples': expected an integer"
            )
