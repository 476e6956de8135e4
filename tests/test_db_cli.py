"""The store's commands: `commlens runs` (list, show, tag, delete), `show`, `export`, `db status|upgrade`,
on SQLite and PostgreSQL, through --db and through COMMLENS_DB."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import sqlite3
from pathlib import Path

import pytest
from store_backends import make_measurement, make_run, make_system, pg_server, pg_url, store_url  # noqa: F401
from typer.testing import CliRunner, Result

from commlens.cli.app import _register, app
from commlens.results import Run, run_from_dict
from commlens.results.stats import TimeStats
from commlens.store import Store
from commlens.store.export import CSV_COLUMNS

LEGACY_DUMP = Path(__file__).parent / "data" / "store" / "legacy-0001.sql"

_register()


def _cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)


def _runs() -> list[Run]:
    reported = TimeStats(
        mean_s=5e-5, p50_s=None, p95_s=None, p99_s=None, min_s=None, max_s=None, stdev_s=None, cv=None, n=20
    )
    ingested = Run(
        run_id="c0ffee00ingested",
        tag="ci",
        started_at="2024-05-02T09:30:00+02:00",
        revision="abc1234",
        source="nccl-tests",
        system=make_system(),
        measurements=(make_measurement("all_reduce", 1 << 20, (), reported=reported, nwrong=0),),
    )
    return [
        make_run(
            "aaaa1111nightly1",
            tag="nightly",
            started_at="2024-05-01T02:00:00Z",
            revision="r1",
            ops=("all_reduce", "all_gather"),
        ),
        ingested,
        make_run(
            "bbbb2222nightly2",
            tag="nightly",
            started_at="2024-05-03T02:00:00Z",
            revision="r2",
            ops=("all_reduce",),
            scale=2.0,
        ),
    ]


@pytest.fixture
def db(store_url: str) -> str:
    with Store.open(store_url) as store:
        store.save_runs(_runs())
    return store_url


def test_runs_lists_newest_first_with_the_same_table_as_runs_list(db: str) -> None:
    fp = make_system().fingerprint()[:8]
    expected = (
        "run           started (UTC)        status    ranks  backend  ops                    rows  avg busbw GB/s"
        "  tag      revision  fingerprint\n"
        "bbbb2222nigh  2024-05-03 02:00:00  complete      4  gloo     all_reduce                2           0.128"
        f"  nightly  r2        {fp}\n"
        "c0ffee00inge  2024-05-02 07:30:00  complete      4  gloo     all_reduce                1          31.457"
        f"  ci       abc1234   {fp}\n"
        "aaaa1111nigh  2024-05-01 02:00:00  complete      4  gloo     all_gather,all_reduce     4           0.192"
        f"  nightly  r1        {fp}\n"
    )
    plain = _cli("runs", "--db", db)
    assert plain.exit_code == 0, plain.output
    assert plain.stdout == expected
    assert _cli("runs", "list", "--db", db).stdout == expected
    assert _cli("runs", "--db", db, "list").stdout == expected  # --db given to the group


def test_runs_filters_and_json(db: str, tmp_path: Path) -> None:
    def ids(*args: str) -> list[str]:
        result = _cli("runs", "list", "--json", "--db", db, *args)
        assert result.exit_code == 0, result.output
        return [r["run_id"] for r in json.loads(result.stdout)]

    assert ids() == ["bbbb2222nightly2", "c0ffee00ingested", "aaaa1111nightly1"]
    assert ids("--tag", "nightly") == ["bbbb2222nightly2", "aaaa1111nightly1"]
    assert ids("--op", "all_gather") == ["aaaa1111nightly1"]
    assert ids("--op", "allgather") == ["aaaa1111nightly1"]  # nccl-tests' spelling
    assert ids("--since", "2024-05-02", "--until", "2024-05-02") == ["c0ffee00ingested"]
    assert ids("--fingerprint", make_system().fingerprint()[:8], "--limit", "2") == [
        "bbbb2222nightly2",
        "c0ffee00ingested",
    ]
    assert ids("--fingerprint", "0000") == []
    doc = json.loads(_cli("runs", "--json", "--tag", "ci", "--db", db).stdout)[0]
    assert doc["started_at"] == "2024-05-02T09:30:00+02:00"
    assert doc["started_at_utc"] == "2024-05-02T07:30:00+00:00"
    assert (doc["source"], doc["ops"], doc["nmeasurements"]) == ("nccl-tests", ["all_reduce"], 1)
    assert _cli("runs", "--tag", "weekly", "--db", db).stdout == "no runs match\n"

    bad = _cli("runs", "--since", "last week", "--db", db)
    assert bad.exit_code == 2
    assert bad.stderr == "error: since 'last week' is not an ISO 8601 time\n"
    # refused as well where there is nothing to list yet (it answered "no runs match", exit 0)
    nothing = _cli("runs", "--until", "soon", "--db", str(tmp_path / "never-made.db"))
    assert (nothing.exit_code, nothing.stderr) == (2, "error: until 'soon' is not an ISO 8601 time\n")
    assert not (tmp_path / "never-made.db").exists()
    unknown = _cli("runs", "--op", "allreduse", "--db", db)
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith("error: --op: unknown op 'allreduse'; known: all_reduce, all_gather")


def test_show_and_runs_show_print_the_same(db: str) -> None:
    top = _cli("show", "bbbb", "--db", db)
    assert top.exit_code == 0, top.output
    assert top.stdout == _cli("runs", "show", "bbbb", "--db", db).stdout
    assert "# status complete  started 2024-05-03T02:00:00Z  tag nightly  revision r2" in top.stdout
    as_json = json.loads(_cli("runs", "show", "c0ffee00", "--json", "--db", db).stdout)
    assert run_from_dict(as_json) == _runs()[1]
    missing = _cli("runs", "show", "zzzz", "--db", db)
    assert (missing.exit_code, missing.stderr) == (2, "error: no run matches 'zzzz'\n")


def test_runs_tag_sets_replaces_and_removes(db: str) -> None:
    assert (
        _cli("runs", "tag", "aaaa", "release", "--db", db).stdout == "run aaaa1111nightly1: tag release (was nightly)\n"
    )
    assert (
        _cli("runs", "tag", "aaaa", "--remove", "--db", db).stdout
        == "run aaaa1111nightly1: tag removed (was release)\n"
    )
    assert _cli("runs", "tag", "aaaa", "kept", "--db", db).stdout == "run aaaa1111nightly1: tag kept\n"
    with Store.open(db) as store:
        assert store.get_run("aaaa").tag == "kept"
    for args in (("aaaa",), ("aaaa", "x", "--remove")):
        wrong = _cli("runs", "tag", *args, "--db", db)
        assert (wrong.exit_code, wrong.stderr) == (2, "error: give either a TAG or --remove\n")


def test_runs_delete_needs_yes_without_a_terminal(db: str) -> None:
    refused = _cli("runs", "delete", "aaaa", "bbbb", "--db", db)
    assert refused.exit_code == 2
    assert refused.stderr == "error: refusing to delete 2 runs without --yes (no terminal to confirm on)\n"
    unknown = _cli("runs", "delete", "aaaa", "nope1234", "--yes", "--db", db)
    assert (unknown.exit_code, unknown.stderr) == (2, "error: no run matches 'nope1234'\n")
    with Store.open(db) as store:
        assert len(store.list_runs()) == 3  # nothing deleted by either

    done = _cli("runs", "delete", "aaaa", "bbbb2222nightly2", "--yes", "--db", db)
    assert done.exit_code == 0, done.output
    assert done.stdout == "deleted 2 runs: aaaa1111nightly1, bbbb2222nightly2\n"
    with Store.open(db) as store:
        assert [s.run_id for s in store.list_runs()] == ["c0ffee00ingested"]


def test_export_csv_one_row_per_measurement(db: str, tmp_path: Path) -> None:
    out = tmp_path / "out" / "all.csv"
    out.parent.mkdir()  # export makes no directory (issue 28: tests/test_store_edges.py)
    result = _cli("export", "--db", db, "--output", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr == f"exported 7 measurements of 3 runs to {out} (csv)\n"
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r["run_id"], r["op"], r["size_bytes"]) for r in rows] == [  # oldest run first, then the run's order
        ("aaaa1111nightly1", "all_reduce", "1024"),
        ("aaaa1111nightly1", "all_reduce", "4096"),
        ("aaaa1111nightly1", "all_gather", "1024"),
        ("aaaa1111nightly1", "all_gather", "4096"),
        ("c0ffee00ingested", "all_reduce", "1048576"),
        ("bbbb2222nightly2", "all_reduce", "1024"),
        ("bbbb2222nightly2", "all_reduce", "4096"),
    ]
    fp = make_system().fingerprint()
    first = _runs()[0].measurements[0]
    assert rows[0] == {
        "run_id": "aaaa1111nightly1",
        "started_at": "2024-05-01T02:00:00Z",
        "tag": "nightly",
        "revision": "r1",
        "fingerprint": fp,
        "world_size": "4",
        "backend": "gloo",
        "op": "all_reduce",
        "algo": "builtin",
        "dtype": "float32",
        "redop": "sum",
        "root": "-1",
        "size_bytes": "1024",
        "count": "256",
        "in_place": "false",
        "iterations": "2",
        "mean_s": repr(first.stats.mean_s),
        "p50_s": repr(first.stats.p50_s),
        "p95_s": repr(first.stats.p95_s),
        "p99_s": repr(first.stats.p99_s),
        "min_s": "1e-05",
        "max_s": "2e-05",
        "cv": repr(first.stats.cv),
        "algbw_bytes_per_s": repr(first.algbw_bytes_per_s),
        "busbw_bytes_per_s": repr(first.busbw_bytes_per_s),
        "nwrong": "",
        "group": "",  # a benchmark row has no process group
    }
    # A row ingested without samples: the reported mean and count, empty where the tool printed nothing.
    ingested = rows[4]
    assert (
        ingested["started_at"],
        ingested["iterations"],
        ingested["mean_s"],
        ingested["p50_s"],
        ingested["cv"],
        ingested["nwrong"],
    ) == ("2024-05-02T07:30:00Z", "20", "5e-05", "", "", "0")
    assert sorted(p.name for p in out.parent.iterdir()) == ["all.csv"]  # no temporary file left


def test_export_json_is_a_list_of_runs_and_takes_runs_and_filters(db: str, tmp_path: Path) -> None:
    out = tmp_path / "nightly.json"
    result = _cli("export", "--db", db, "--tag", "nightly", "-o", str(out))  # format from the suffix
    assert result.exit_code == 0, result.output
    docs = json.loads(out.read_text())
    assert [d["format"] for d in docs] == ["commlens.run/5"] * 2
    assert [run_from_dict(d) for d in docs] == [_runs()[0], _runs()[2]]

    picked = _cli("export", "bbbb", "c0ffee00", "--format", "json", "--db", db)
    assert [d["run_id"] for d in json.loads(picked.stdout)] == ["c0ffee00ingested", "bbbb2222nightly2"]
    both = _cli("export", "bbbb", "c0ffee00", "--tag", "ci", "--format", "csv", "--db", db)
    assert {r["run_id"] for r in csv.DictReader(io.StringIO(both.stdout))} == {"c0ffee00ingested"}
    none = _cli("export", "--tag", "weekly", "--format", "json", "--db", db)
    assert (none.exit_code, json.loads(none.stdout)) == (0, [])


def test_export_errors_exit_2_and_write_nothing(db: str, tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    cases = [
        (("export", "zzzz9999"), "error: no run matches 'zzzz9999'\n"),
        (("export", "--since", "soon"), "error: since 'soon' is not an ISO 8601 time\n"),
        (("export", "--format", "xml"), "error: --format must be csv or json, got 'xml'\n"),
        (("export", "-o", str(tmp_path)), f"error: --output {tmp_path} is a directory\n"),
    ]
    for args, message in cases:
        result = _cli(*args, "--db", db, *(() if "-o" in args else ("-o", str(out))))
        assert (result.exit_code, result.stderr) == (2, message), args
    assert not out.exists()
    (tmp_path / "file").write_text("")
    blocked = _cli("export", "--db", db, "-o", str(tmp_path / "file" / "x.csv"))
    assert blocked.exit_code == 2
    assert blocked.stderr.startswith(f"error: cannot write {tmp_path / 'file' / 'x.csv'}: ")


def test_commlens_db_selects_the_store_for_every_command(db: str, tmp_path: Path) -> None:
    env = {"COMMLENS_DB": db}
    assert [r["run_id"] for r in json.loads(_cli("runs", "--json", env=env).stdout)] == [
        "bbbb2222nightly2",
        "c0ffee00ingested",
        "aaaa1111nightly1",
    ]
    assert _cli("show", "aaaa", env=env).exit_code == 0
    assert _cli("runs", "tag", "aaaa", "x", env=env).exit_code == 0
    assert _cli("export", "--tag", "x", env=env).stdout.count("aaaa1111nightly1") == 4
    assert "state     up to date" in _cli("db", "status", env=env).stdout
    other = str(tmp_path / "other.db")  # --db wins over the environment
    assert _cli("runs", "--db", other, env=env).stdout == "no runs stored yet: `commlens bench` stores one\n"


def test_db_status_and_upgrade_of_a_store_from_before_alembic(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(LEGACY_DUMP.read_text())
    con.close()
    url = f"sqlite:///{path}"

    refused = _cli("runs", "--db", str(path))
    assert refused.exit_code == 2
    assert refused.stderr == (
        f"error: result store {url} has schema 0001, this commlens needs 0007: "
        "run `commlens db upgrade` (with the same --db) to upgrade it in place\n"
    )
    assert _cli("db", "status", "--db", str(path)).stdout == (
        f"store     {url}\n"
        "schema    0001 (from before Alembic)\n"
        "commlens  0007\n"
        "state     older than this commlens: run `commlens db upgrade`\n"
        "runs      3\n"
        "integrity ok\n"
    )
    upgraded = _cli("db", "upgrade", "--db", str(path))
    assert (upgraded.exit_code, upgraded.stdout) == (0, f"{url}: upgraded schema from 0001 to 0007\n")
    assert _cli("db", "upgrade", "--db", str(path)).stdout == f"{url}: already at schema 0007, nothing to do\n"
    status = json.loads(_cli("db", "status", "--json", "--db", str(path)).stdout)
    assert status == {
        "url": url,
        "revision": "0007",
        "head": "0007",
        "state": "current",
        "stamped": True,
        "nruns": 3,
        "integrity": "ok",
        "integrity_ok": True,
    }
    assert _cli("runs", "--db", str(path)).stdout.count("\n") == 4


def test_db_upgrade_creates_and_refuses_newer(store_url: str) -> None:
    shown = store_url.split("@")[-1]  # the PostgreSQL URL as printed hides nothing here: no password
    created = _cli("db", "upgrade", "--db", store_url)
    assert created.exit_code == 0, created.output
    assert created.stdout.endswith(f"{shown}: created schema 0007\n")
    with Store.open(store_url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0008'")
    for args in (("db", "upgrade"), ("runs",), ("export",)):
        result = _cli(*args, "--db", store_url)
        assert result.exit_code == 2
        assert result.stderr.endswith("database schema 0008 is newer than this commlens (0007); upgrade commlens\n")
    assert "state     newer than this commlens: upgrade commlens" in _cli("db", "status", "--db", store_url).stdout


def test_unreachable_store_is_an_error_naming_it() -> None:
    for args, doing in (
        (("runs",), "open"),
        (("db", "status"), "open"),
        (("db", "upgrade"), "upgrade"),
        (("export",), "open"),
    ):
        result = _cli(*args, "--db", "postgresql://bench:secret@127.0.0.1:1/results")
        assert result.exit_code == 2
        assert result.stderr.startswith(
            f"error: cannot {doing} result store postgresql+psycopg://bench:***@127.0.0.1:1/results: "
        ), args
        assert "secret" not in result.stderr


def test_control_characters_in_stored_text_are_escaped_when_printed(store_url: str) -> None:
    """A tag, note, revision or host name from a hostile file cannot drive the terminal it is printed on."""
    system = dataclasses.replace(
        make_system(), hosts=("node-\x07a", "node-b"), ranks_per_host={"node-\x07a": 2, "node-b": 2}
    )
    run = dataclasses.replace(
        make_run("e5c0000hostile1", system=system),
        tag="\x1b]0;pwned\x07",
        revision="r1\rfake",
        notes=("looks fine\x1b[2J\u202e", "two\nlines"),
    )
    with Store.open(store_url) as store:
        store.save_run(run)
    outputs = {
        "runs": _cli("runs", "--db", store_url).stdout,
        "show": _cli("show", "e5c0", "--db", store_url).stdout,
        "tag": _cli("runs", "tag", "e5c0", "\x1b[31mred", "--db", store_url).stdout,
    }
    for name, out in outputs.items():
        assert not any(c in out for c in "\x1b\x07\r\u202e"), (name, out)
    assert "\\x1b]0;pwned\\x07" in outputs["runs"]
    assert "r1\\x0dfake" in outputs["runs"]
    show = outputs["show"]
    assert "# looks fine\\x1b[2J\\u202e" in show and "# two\\x0alines" in show
    assert "tag \\x1b]0;pwned\\x07  revision r1\\x0dfake" in show
    assert outputs["tag"] == "run e5c0000hostile1: tag \\x1b[31mred (was \\x1b]0;pwned\\x07)\n"
    # JSON escapes them itself, and the stored text is kept as it was.
    assert json.loads(_cli("show", "e5c0", "--json", "--db", store_url).stdout)["notes"][1] == "two\nlines"


def test_control_characters_in_a_stored_revision_are_escaped_by_db_status(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    with Store.open(str(path)):
        pass
    con = sqlite3.connect(path)
    con.execute("UPDATE alembic_version SET version_num = '9\x1b]0;x\x07'")
    con.commit()
    con.close()
    result = _cli("db", "status", "--db", str(path))
    assert "\x1b" not in result.stdout and "schema    9\\x1b]0;x\\x07\n" in result.stdout
    assert "state     newer than this commlens: upgrade commlens" in result.stdout
