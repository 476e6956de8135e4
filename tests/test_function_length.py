"""No function in src/ longer than 120 lines: past that a reader wants a table of contents, so split it."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "commlens"
MAX_LINES = 120


def _long_functions() -> dict[str, int]:
    """``path:name`` -> lines, for every function (methods and nested ones too) over the limit."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    found[f"{path.relative_to(SRC).as_posix()}:{node.name}"] = lines
    return found


def test_no_function_over_120_lines() -> None:
    long = _long_functions()
    assert not long, f"functions over {MAX_LINES} lines (split them): {long}"
