"""Every import inside ``src/commlens`` keeps to the table "Layers and data flow" of DESIGN.md.

The table is read from ``../shared/DESIGN.md`` when that checkout is present, else from the copy
below (kept equal to it by ``test_the_embedded_table_is_design_md_s``). Each module's imports are read
with ``ast``: those at the top, inside functions and under ``if TYPE_CHECKING:`` alike. A stage may
import itself, the stages its row lists ("all above": every stage of the rows above it), and the leaves
anyone may import: ``commlens.files`` (atomic writes, the user data dir), ``commlens.specdata`` (YAML spec loading,
which imports nothing of commlens; see its docstring), ``commlens.errors`` (``CommlensError``, the base of every
stage's errors, with its exit code), ``commlens._lazy`` (a package's lazy exports, which imports nothing of commlens)
and the package ``commlens`` itself (its ``__version__``).
``commlens.__main__`` is the CLI's entry point and counts as ``cli``.

The crossings known today are listed in ``KNOWN_CROSSINGS``: the test fails for a crossing not listed,
and for a listed one that is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = SRC / "commlens"
DESIGN_MD = REPO.parent / "shared" / "DESIGN.md"

# A copy of DESIGN.md's table (its module and may-import columns), for checkouts without ../shared.
EMBEDDED_TABLE = """\
| `ops` | nothing of commlens |
| `results` | `ops` |
| `bench` | `ops`, `results` |
| `algos` | `ops` |
| `store` | `results` |
| `ingest` | `ops`, `results` |
| `regress` | `ops`, `results`, `store` |
| `topology` | nothing of commlens |
| `model` | `ops`, `topology`, `results` |
| `sim` | `ops`, `topology`, `model` |
| `workload`, `project` | `model`, `topology`, `sim` |
| `cluster` | nothing of commlens |
| `diagnose` | `ops`, `bench`, `results`, `ingest`, `model` |
| `expect` | `ops`, `results`, `topology`, `model` |
| `replay` | `ops`, `results`, `ingest`, `bench` |
| `monitor` | `ops`, `results`, `model`, `topology`, `diagnose`, `store` |
| `report`, `serve` | all above |
| `cli` | all above |
"""

# Modules anyone may import: they hold no stage's logic and import nothing of commlens.
LEAVES = frozenset({"commlens", "commlens.specdata", "commlens.files", "commlens.errors", "commlens._lazy"})
# Modules that belong to a stage other than their own name says.
STAGE_OF = {
    "commlens.__main__": "cli",
    # ``python -m commlens.bench`` under an external launcher: a face that saves rank 0's run (cli.bench_outputs)
    "commlens.bench.__main__": "cli",
}

# Imports that cross the table today: (file under src/, module imported). Each is a debt to pay off;
# remove its line when it is gone (the test says so).
KNOWN_CROSSINGS: frozenset[tuple[str, str]] = frozenset(
    {
        # bench runs the collective algorithms (--algo) and the tuner: bench's row lists only ops and results.
        ("commlens/bench/algorithms.py", "commlens.algos"),
        ("commlens/bench/algorithms.py", "commlens.algos.tuning"),
        ("commlens/bench/tune.py", "commlens.algos"),
        ("commlens/bench/tune.py", "commlens.algos.tuning"),
        # bench places ranks on the emulated cluster's hosts (--cluster); cluster is below no row of bench's.
        ("commlens/bench/launcher.py", "commlens.cluster"),
        # the monitor's collector finds slowdowns with the detect engine (issue 15); monitor's row omits regress.
        ("commlens/monitor/collect.py", "commlens.regress.detect"),
    }
)


def parse_table(markdown: str) -> dict[str, frozenset[str]]:
    """Stage -> the stages it may import, from the table's rows (``| `a`, `b` | ... | may import |``)."""
    rows: list[tuple[list[str], str]] = []
    for line in markdown.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        rows.append((re.findall(r"`([a-z_]+)`", cells[0]), cells[-1]))
    allowed: dict[str, frozenset[str]] = {}
    above: set[str] = set()
    for stages, may in rows:
        if may == "nothing of commlens":
            imports: set[str] = set()
        elif may == "all above":
            imports = set(above)
        else:
            imports = set(re.findall(r"`([a-z_]+)`", may))
            if not imports:
                raise ValueError(f"cannot read the may-import cell {may!r}")
        for stage in stages:
            allowed[stage] = frozenset(imports | set(stages))  # a row's stages may import one another
        above.update(stages)
    return allowed


def design_table() -> str:
    """The section "Layers and data flow" of ../shared/DESIGN.md, or the embedded copy without it."""
    if not DESIGN_MD.is_file():
        return EMBEDDED_TABLE
    text = DESIGN_MD.read_text()
    section = text.split("## Layers and data flow", 1)[1].split("\n## ", 1)[0]
    return section


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> str | None:
    """The stage a ``commlens.*`` module belongs to; None for a leaf."""
    if module in LEAVES:
        return None
    if module in STAGE_OF:
        return STAGE_OF[module]
    return module.split(".")[1]


def _is_module(name: str, src: Path) -> bool:
    relative = Path(*name.split("."))
    return (src / relative).is_dir() or (src / relative).with_suffix(".py").is_file()


def imports_of(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """(line, module) for each commlens module the file imports, wherever the import statement is."""
    module = module_name(path, src)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from commlens import ops`` imports the stage commlens.ops, not a name of the package
            subs = [
                f"{base}.{alias.name}"
                for alias in node.names
                if base == "commlens" and _is_module(f"{base}.{alias.name}", src)
            ]
            found.extend((node.lineno, name) for name in (subs or [base]))
    return [(line, name) for line, name in found if name == "commlens" or name.startswith("commlens.")]


def crossings(
    allowed: dict[str, frozenset[str]], src: Path = SRC
) -> tuple[dict[tuple[str, str], list[int]], list[str]]:
    """The imports the table does not allow, (file, module) -> lines; and modules in no row of the table."""
    crossed: dict[tuple[str, str], list[int]] = {}
    unplaced: list[str] = []
    for path in sorted((src / "commlens").rglob("*.py")):
        file = path.relative_to(src).as_posix()
        own = stage_of(module_name(path, src))
        if own is None:
            continue
        if own not in allowed:
            unplaced.append(f"{file} (stage {own!r})")
            continue
        for line, imported in imports_of(path, src):
            target = stage_of(imported)
            if target is None or target in allowed[own]:
                continue
            crossed.setdefault((file, imported), []).append(line)
    return {key: sorted(lines) for key, lines in crossed.items()}, unplaced


def test_the_table_is_read() -> None:
    allowed = parse_table(design_table())
    assert allowed["ops"] == {"ops"} and allowed["topology"] == {"topology"}
    assert allowed["bench"] == {"bench", "ops", "results"}
    assert allowed["project"] == {"workload", "project", "model", "topology", "sim"}
    assert allowed["report"] == allowed.keys() - {"cli"}  # "all above", and its own row
    assert allowed["cli"] == allowed.keys()


def test_the_embedded_table_is_design_md_s() -> None:
    if not DESIGN_MD.is_file():
        pytest.skip("no ../shared/DESIGN.md in this checkout")
    assert parse_table(design_table()) == parse_table(EMBEDDED_TABLE), (
        "DESIGN.md's table changed: update EMBEDDED_TABLE in tests/test_layering.py to match it"
    )


def test_a_crossing_is_caught_wherever_the_import_is(tmp_path: Path) -> None:
    (tmp_path / "commlens" / "ingest").mkdir(parents=True)
    (tmp_path / "commlens" / "store").mkdir()
    for name in ("__init__.py", "ops.py", "specdata.py", "store/__init__.py", "ingest/__init__.py"):
        (tmp_path / "commlens" / name).write_text("")
    (tmp_path / "commlens" / "ingest" / "fine.py").write_text(
        "from commlens import ops, specdata, __version__\nfrom . import fine\n"
    )
    (tmp_path / "commlens" / "ingest" / "bad.py").write_text(
        "import json\n\n\ndef f():\n    from ..store import x\n\n\n"
        "if False:\n    import commlens.store.models\nfrom commlens import store\n"
    )
    (tmp_path / "commlens" / "newstage").mkdir()
    (tmp_path / "commlens" / "newstage" / "__init__.py").write_text("")
    crossed, unplaced = crossings(parse_table(EMBEDDED_TABLE), tmp_path)
    assert crossed == {
        ("commlens/ingest/bad.py", "commlens.store"): [5, 10],
        ("commlens/ingest/bad.py", "commlens.store.models"): [9],
    }
    assert unplaced == ["commlens/newstage/__init__.py (stage 'newstage')"]


def test_imports_are_read_everywhere_in_a_file() -> None:
    # a top-level import, one inside a function, and ``from commlens import <module>``
    lines = {name for _, name in imports_of(PACKAGE / "cli" / "bench_outputs.py")}
    assert {"commlens.store", "commlens.results.jsonfmt"} <= lines
    lines = {name for _, name in imports_of(PACKAGE / "cli" / "ingest_cmd.py")}
    assert {"commlens.cli.app", "commlens.ingest", "commlens.store"} <= lines


def test_no_import_crosses_the_layers() -> None:
    crossed, unplaced = crossings(parse_table(design_table()))
    assert not unplaced, f"modules in no row of DESIGN.md's table (add their stage there): {unplaced}"
    new = {key: lines for key, lines in crossed.items() if key not in KNOWN_CROSSINGS}
    gone = sorted(KNOWN_CROSSINGS - crossed.keys())
    problems = [
        f"{file}:{','.join(map(str, lines))} imports {module}, which its stage may not "
        f'(DESIGN.md, "Layers and data flow")'
        for (file, module), lines in sorted(new.items())
    ]
    problems += [f"{file} no longer imports {module}: remove it from KNOWN_CROSSINGS" for file, module in gone]
    assert not problems, "\n".join(problems)


def test_no_sql_outside_the_store() -> None:
    """The store's tables are used through its API only (issue 29): no module outside ``commlens.store``
    imports SQLAlchemy or the store's models."""
    offenders = sorted(
        f"{path.relative_to(SRC)} imports {name}"
        for path in PACKAGE.rglob("*.py")
        if "store" not in path.relative_to(PACKAGE).parts[:1]
        for name in _all_imports(path)
        if name.split(".")[0] == "sqlalchemy" or name.startswith("commlens.store.models")
    )
    assert not offenders, offenders


def _all_imports(path: Path) -> set[str]:
    """Every module a file imports (third-party ones too), wherever the import statement is."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names
