"""Every module commlens (or its test suite) imports is the standard library, commlens itself, or a
distribution that pyproject.toml declares: nothing that works only because some other package happens to pull
it in (typer up to 0.28 pulled in click; 0.29 does not, and ``import click`` broke ``commlens project``)."""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> tuple[set[str], set[str]]:
    """Normalised distribution names: the runtime dependencies, and those of every optional extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(specs: list[str]) -> set[str]:
        return {re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs}

    extras = set().union(*(names(v) for v in project.get("optional-dependencies", {}).values()))
    return names(project["dependencies"]), extras


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(top-level module, line, imported at module level) for each absolute import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` / `try:` blocks at module level count as module level
        if isinstance(node, (ast.If, ast.Try)):
            top_level |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name.split(".")[0], node.lineno, id(node) in top_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno, id(node) in top_level))
    return found


def _third_party(paths: list[Path], local: set[str]) -> list[tuple[str, str, bool]]:
    out = []
    for path in paths:
        for module, line, at_top in _imports(path):
            if module in sys.stdlib_module_names or module == "commlens" or module in local:
                continue
            out.append((module, f"{path.relative_to(ROOT)}:{line}", at_top))
    return out


@functools.cache
def _installed() -> dict[str, list[str]]:
    return packages_distributions()


def _distributions(module: str) -> set[str]:
    """The distributions that provide ``module``; where none is installed (an extra such as ray), the
    distribution of that same name."""
    found = _installed().get(module)
    return {d.lower().replace("_", "-") for d in found} if found else {module.lower().replace("_", "-")}


def test_the_package_imports_only_declared_dependencies() -> None:
    runtime, extras = _declared()
    wrong = []
    for module, where, at_top in _third_party(sorted((ROOT / "src" / "commlens").rglob("*.py")), set()):
        dists = _distributions(module)
        if dists & runtime:
            continue
        if dists & extras and not at_top:
            continue  # an optional extra (ray), imported where it is used
        wrong.append(
            f"{where}: import {module} ({', '.join(sorted(dists))}; "
            f"{'an extra, imported at module level' if dists & extras else 'not declared'})"
        )
    assert not wrong, "\n".join(wrong)


def test_the_tests_and_benchmarks_import_only_declared_dependencies() -> None:
    runtime, extras = _declared()
    files = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py"))
    local = {p.stem for p in files} | {p.name for p in (ROOT / "tests").iterdir() if p.is_dir()}
    wrong = [
        f"{where}: import {module}"
        for module, where, _ in _third_party(files, local)
        if not _distributions(module) & (runtime | extras)
    ]
    assert not wrong, "\n".join(wrong)


def test_an_undeclared_import_is_caught(tmp_path: Path) -> None:
    """The check itself: ``import click`` (not declared, and not installed with typer >= 0.29) is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import click\n    import typer\n")
    found = [(m, at_top) for m, _, at_top in _imports(bad)]
    assert found == [("click", False), ("typer", False)]
    runtime, _ = _declared()
    assert "typer" in runtime and not _distributions("click") & runtime
    assert _distributions("yaml") == {"pyyaml"}
