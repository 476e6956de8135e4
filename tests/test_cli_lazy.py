"""Commands are registered by name and their modules imported on use (issue 34's start-up).

`commlens --help` lists every command from ``LAZY_COMMANDS`` without importing their modules; its output must
stay what registering every module first prints. Each check runs in a fresh interpreter, as a user starts it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys

import typer.main

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


def test_every_registered_command_is_listed_with_its_own_help_text() -> None:
    app_module = importlib.import_module("commlens.cli.app")
    app_module._register()
    group = typer.main.get_command(app_module.app)
    assert isinstance(group, typer.core.TyperGroup)
    assert list(group.commands) == ["bench", *app_module.LAZY_COMMANDS]
    for name, (module, text) in app_module.LAZY_COMMANDS.items():
        command = group.commands[name]
        assert inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0] == text, name
        assert f"commlens.cli.{module}" in sys.modules, name
