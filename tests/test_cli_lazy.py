"""Commands are registered by name and their modules imported on use (issue 34's start-up).

`commlens --help` lists every command from ``LAZY_COMMANDS`` without importing their modules; its output must
stay what registering every module first prints. Each check runs in a fresh interpreter, as a user starts it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

RUN = """
import json, sys
eager, sys.argv = sys.argv[1] == "eager", ["commlens", *sys.argv[2:]]
from commlens.cli.app import _register, main
if eager:
    _register()
try:
    main()
except SystemExit as e:
    code = e.code
mods = sorted(m for m in sys.modules if m.startswith("commlens.cli.") and m.endswith("_cmd"))
print(json.dumps({"code": code, "modules": mods}), file=sys.stderr)
"""


def _run(mode: str, *argv: str) -> tuple[str, str, dict]:
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb"}
    proc = subprocess.run(
        [sys.executable, "-c", RUN, mode, *argv], env=env, capture_output=True, text=True, timeout=120
    )
    *err, last = proc.stderr.rstrip("\n").split("\n")
    return proc.stdout, "\n".join(err), json.loads(last)


def test_the_root_help_imports_no_command_module_and_prints_what_eager_registration_prints() -> None:
    out, _, lazy = _run("lazy", "--help")
    eager_out, _, eager = _run("eager", "--help")
    assert lazy == {"code": 0, "modules": []}
    assert len(eager["modules"]) >= 17
    assert out == eager_out
    assert "compare " in out and "threshold " in out and "sim " in out


def test_a_command_imports_its_own_module_only() -> None:
    out, _, loaded = _run("lazy", "topology", "list")
    assert loaded["code"] == 0 and "b200" in out and "max nodes" in out
    assert loaded["modules"] == ["commlens.cli.topology_cmd"]


def test_a_subcommand_help_and_a_misspelt_command_behave_as_with_every_module_registered() -> None:
    for argv in (["runs", "--help"], ["diagnose", "links", "--help"], ["comapre"], ["runs", "lst"]):
        assert _run("lazy", *argv)[:2] == _run("eager", *argv)[:2], argv
    _, err, loaded = _run("lazy", "comapre")
    assert loaded["code"] == 2 and "Did you mean 'compare'?" in err


LISTED = """
import inspect, json, sys
import typer.main
import importlib
app_module = importlib.import_module("commlens.cli.app")
app_module._register()
group = typer.main.get_command(app_module.app)
out = {"commands": list(group.commands), "lazy": list(app_module.LAZY_COMMANDS), "wrong_help": [], "not_imported": []}
for name, (module, text) in app_module.LAZY_COMMANDS.items():
    command = group.commands[name]
    if inspect.cleandoc(command.short_help or command.help or "").split("\\n\\n")[0] != text:
        out["wrong_help"].append(name)
    if f"commlens.cli.{module}" not in sys.modules:
        out["not_imported"].append(name)
print(json.dumps(out))
"""


def test_every_registered_command_is_listed_with_its_own_help_text() -> None:
    # in a fresh interpreter: a test that imported a command module first would register it out of order
    proc = subprocess.run([sys.executable, "-c", LISTED], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["commands"] == ["bench", *got["lazy"]]
    assert got["wrong_help"] == [] and got["not_imported"] == []
