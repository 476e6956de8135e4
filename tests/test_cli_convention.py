"""One command-line convention over every command (issue 29, docs/cli.md): ``--version``; ``--json`` is a flag
that prints one JSON document on stdout and nothing else there; stored objects are named by unique id
prefixes; workload presets can be listed; compare names one p-value the same way in every output."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer
from benchutil import commlens

from commlens.cli.app import _register, app

_register()
DATA = Path(__file__).parent / "data" / "regress"

# Commands that print no table or report of their own (a confirmation line, a server, a document that is
# already JSON), so take no --json. Anything else must.
_NO_JSON = {
    ("baseline", "set"),
    ("baseline", "unset"),
    ("threshold", "set"),
    ("threshold", "unset"),
    ("cluster", "down"),
    ("db", "upgrade"),
    ("reports", "import"),
    ("reports", "show"),  # prints the stored JSON document itself
    ("runs", "delete"),
    ("runs", "tag"),
    ("serve",),
    ("bench",),  # argparse behind it: `--json` alone or `--json FILE` (test below)
}


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands:
        return [leaf for name, sub in sorted(subcommands.items()) for leaf in _leaves(sub, (*path, name))]
    return [(path, command)]


def test_every_command_that_prints_a_report_takes_json_as_a_flag() -> None:
    leaves = _leaves(typer.main.get_command(app))
    assert len(leaves) >= 45
    missing, not_flags = [], []
    for path, command in leaves:
        json_params = [p for p in command.params if "--json" in getattr(p, "opts", [])]
        if not json_params:
            if path not in _NO_JSON:
                missing.append(" ".join(path))
        elif not json_params[0].is_flag:
            not_flags.append(" ".join(path))
    assert not missing, f"commands without --json: {missing}"
    assert not not_flags, f"--json takes a value here, not the convention's flag: {not_flags}"


def test_version() -> None:
    proc = commlens("--version")
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(
        r"commlens \d+\.\d+\.\d+ \(run files up to commlens\.run/\d+; Python 3\.\d+\.\d+\)\n", proc.stdout
    )


def test_compare_json_is_the_json_format_and_p_is_adjusted_everywhere(tmp_path: Path) -> None:
    # one row of the 10%-slower candidate made 20% slower: its p-value differs from the others', so the
    # Benjamini-Hochberg adjustment over the rows shows (raw and adjusted differ for some row)
    text = (DATA / "candidate-all_reduce-10pct-slower.log").read_text()
    row = "     1048576        262144     float     sum      -1    30.54   34.33   60.09"
    assert row in text
    slower = tmp_path / "candidate.log"
    slower.write_text(
        text.replace(row, "     1048576        262144     float     sum      -1    33.31   31.48   55.10")
    )
    base, cand = f"file:{DATA / 'base-all_reduce.log'}", f"file:{slower}"
    given = ("--noise-floor", "3%")
    as_json = commlens("compare", base, cand, "--json", *given)
    as_format = commlens("compare", base, cand, "--format", "json", *given)
    assert as_json.returncode == as_format.returncode, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc == json.loads(as_format.stdout)
    table = commlens("compare", base, cand, *given).stdout.splitlines()
    header = next(line for line in table if line.startswith("# op"))
    assert " p adj " in header and " p " not in header.replace(" p adj ", " ")
    column = header.index("p adj") + len("p adj")  # right-aligned: the value ends under the header's end
    shown = [line[:column].split()[-1] for line in table if line.startswith("  all_reduce")]
    adjusted = [r["p_adjusted"] for r in doc["rows"]]
    raw = [r["p_value"] for r in doc["rows"]]
    assert len(shown) == 6 and shown == [f"{p:.2g}" for p in adjusted]
    assert [f"{p:.2g}" for p in raw] != shown  # what the terminal showed before: the raw p-values
    both = commlens("compare", base, cand, "--json", "--format", "markdown")
    assert both.returncode == 2 and both.stderr.startswith("error: --json and --format markdown"), both.stderr


def test_monitor_collect_json_prints_the_summary_and_output_writes_it(tmp_path: Path) -> None:
    dumps = Path(__file__).parent / "data" / "nccl_inspector" / "compact"
    out = tmp_path / "summary.json"
    proc = commlens("monitor", "collect", "--inspector", str(dumps), "--replay", "--json", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed == json.loads(out.read_text()) and "alerts" in printed and "groups" in printed


def test_reports_are_named_by_unique_prefixes(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    ids = []
    for gpus in ("8", "16"):
        proc = commlens(
            "project", "megatron-gpt-1.7b", "-t", "dgx-h100", "--gpus", gpus, "--json", "--save", "--db", db
        )
        assert proc.returncode == 0, proc.stderr
        ids.append(re.search(r"saved projection report ([0-9a-f]{32})", proc.stderr).group(1))  # type: ignore[union-attr]
    for report_id in ids:
        shown = commlens("reports", "show", report_id[:6], "--db", db)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["gpus"] == (8 if report_id == ids[0] else 16)
    common = 0
    while ids[0][common] == ids[1][common]:
        common += 1
    if common >= 4:  # both start alike: the shared prefix names neither
        ambiguous = commlens("reports", "show", ids[0][:common], "--db", db)
        assert ambiguous.returncode == 2 and "matches several reports" in ambiguous.stderr
    short = commlens("reports", "show", ids[0][:3], "--db", db)
    assert short.returncode == 2 and short.stderr.startswith("error: ") and "at least 4" in short.stderr


def test_workload_list_and_show() -> None:
    proc = commlens("workload", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert {"llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b"} <= set(rows)
    assert 7.5e9 < rows["llama3-8b"]["parameters"] < 8.5e9
    assert rows["mixtral-8x7b"]["active_parameters"] < rows["mixtral-8x7b"]["parameters"]
    table = commlens("workload", "list").stdout
    assert "llama3-70b" in table and "params (B)" in table
    shown = commlens("workload", "show", "llama3-8b", "--json")
    assert json.loads(shown.stdout)["layers"] == 32
    unknown = commlens("workload", "show", "no-such-model")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown workload preset 'no-such-model'")
