"""commlens.store.refs: one grammar of run references (files, tags, ids and prefixes) for every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlens.results import Measurement, Run, SystemInfo
from commlens.store import Store
from commlens.store.refs import (
    MissingFileError,
    NotOneRunError,
    RunRef,
    StoreOnDemand,
    UnknownRefError,
    UnknownRunError,
    UnknownTagError,
    resolve_run,
    resolve_runs,
)


def _run(run_id: str, started_at: str, tag: str | None) -> Run:
    m = Measurement(
        op="all_reduce",
        dtype="float32",
        redop="sum",
        size_bytes=1024,
        count=256,
        in_place=False,
        world_size=2,
        samples_s=(1e-5, 1.1e-5, 1.2e-5),
    )
    return Run(
        run_id=run_id,
        started_at=started_at,
        tag=tag,
        system=SystemInfo(world_size=2, backend="gloo", cpu_model="test-cpu", cpu_cores=2, torch_version="2.13.0"),
        measurements=(m,),
    )


RUNS = (
    _run("aaaa1111", "2026-11-01T00:00:00+00:00", "nightly"),
    _run("aaaa2222", "2026-11-02T00:00:00+00:00", "nightly"),
    _run("bbbb3333", "2026-11-03T00:00:00+00:00", None),
)


@pytest.fixture()
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "runs.db")
    with Store.open(path) as store:
        for run in RUNS:
            store.save_run(run)
    return path


def _no_file(path: str) -> list[Run]:
    raise AssertionError(f"read {path} as a file")


def test_parse_says_the_kind_only_for_the_three_prefixes() -> None:
    assert RunRef.parse("tag:nightly") == RunRef("tag", "nightly")
    assert RunRef.parse("run:aaaa") == RunRef("run", "aaaa")
    assert RunRef.parse("file:a:b.json") == RunRef("file", "a:b.json")
    assert RunRef.parse("sqlite:x") == RunRef(None, "sqlite:x")


def test_a_tag_pools_its_runs_oldest_first_and_an_id_prefix_names_one(db: str) -> None:
    with StoreOnDemand(db, create=False) as store:
        assert [r.run_id for r in resolve_runs("nightly", store, _no_file)] == ["aaaa1111", "aaaa2222"]
        assert [r.run_id for r in resolve_runs("tag:nightly", store, _no_file)] == ["aaaa1111", "aaaa2222"]
        assert [r.run_id for r in resolve_runs("bbbb", store, _no_file)] == ["bbbb3333"]
        assert resolve_run("run:aaaa2222", store, _no_file) == RUNS[1]


def test_an_existing_file_is_read_without_opening_the_store(tmp_path: Path) -> None:
    path = tmp_path / "nightly"  # named like a tag: the file wins
    path.write_text("")
    read: list[str] = []

    def load(p: str) -> list[Run]:
        read.append(p)
        return [RUNS[2]]

    store = StoreOnDemand(str(tmp_path / "absent.db"), create=False)
    assert resolve_runs(str(path), store, load) == [RUNS[2]]
    assert resolve_runs(f"file:{path}", store, load) == [RUNS[2]]
    assert read == [str(path)] * 2 and store.store is None


def test_each_miss_raises_its_own_error_with_the_message_the_cli_prints(db: str) -> None:
    with StoreOnDemand(db, create=False) as store:
        with pytest.raises(MissingFileError) as missing:
            resolve_runs("gone.json", store, _no_file)
        assert missing.value.labelled("base") == "base 'gone.json': no such file"
        assert store.store is None  # a missing file is known without the store
        with pytest.raises(UnknownTagError) as tag:
            resolve_runs("tag:weekly", store, _no_file)
        assert tag.value.labelled("base") == f"base: no run has tag 'weekly' in {store().url}"
        with pytest.raises(UnknownRunError) as run:
            resolve_runs("run:aaaa", store, _no_file)
        assert run.value.labelled("candidate") == ("candidate: 'aaaa' matches 2 runs: aaaa1111, aaaa2222")
        with pytest.raises(UnknownRefError) as bare:
            resolve_runs("nope", store, _no_file)
        assert str(bare.value) == f"'nope' is not a file, a tag or a run id in {store().url}: no run matches 'nope'"
        with pytest.raises(NotOneRunError) as several:
            resolve_run("nightly", store, _no_file)
        assert str(several.value) == "'nightly' names 2 runs; give one (a run id, or a file of one run)"


def test_model_check_and_diagnose_take_the_same_references(tmp_path: Path) -> None:
    """`model check` pools a tag as `compare` does; `diagnose stragglers --run` takes an id prefix; a missing
    file is named as one (these commands once read references each their own way)."""
    import dataclasses
    import json

    from typer.testing import CliRunner

    from commlens.cli.app import _register, app
    from commlens.ingest import load_runs

    _register()
    fixture = Path(__file__).parent / "data" / "model" / "gloo-4ranks.json"
    run = dataclasses.replace(load_runs(str(fixture))[0], tag="box")
    db = str(tmp_path / "runs.db")
    with Store.open(db) as store:
        store.save_run(run)

    def cli(*args: str):
        return CliRunner().invoke(app, list(args), catch_exceptions=False)

    by_tag = cli("model", "check", "tag:box", "--db", db, "--json")
    by_file = cli("model", "check", str(fixture), "--json")
    assert by_tag.exit_code == 0, by_tag.output
    assert json.loads(by_tag.stdout)["summary"] == json.loads(by_file.stdout)["summary"]
    missing = cli("model", "check", "gone.json", "--db", db)
    assert (missing.exit_code, missing.stderr) == (2, "error: 'gone.json': no such file\n")
    tagged = cli("diagnose", "stragglers", "--run", "box", "--db", db)  # the tag's one run, read from the store
    assert (tagged.exit_code, tagged.stderr) == (2, f"error: run {run.run_id} has no per-rank samples\n")
    unknown = cli("diagnose", "stragglers", "--run", "run:zzzz9999", "--db", db)
    assert (unknown.exit_code, unknown.stderr) == (2, "error: no run matches 'zzzz9999'\n")


def test_show_and_export_take_the_store_s_references(db: str, tmp_path: Path) -> None:
    """`export` and `show` read references with resolve_run_ids: a tag (oldest first), an id or prefix; a file
    is refused as not stored, and `show` wants exactly one run."""
    import json

    from typer.testing import CliRunner

    from commlens.cli.app import _register, app
    from commlens.store.refs import NotStoredError, resolve_run_ids

    with Store.open(db) as store:
        assert resolve_run_ids("nightly", store) == resolve_run_ids("tag:nightly", store) == ["aaaa1111", "aaaa2222"]
        assert resolve_run_ids("bbbb", store) == resolve_run_ids("run:bbbb", store) == ["bbbb3333"]
        (tmp_path / "a.json").write_text("{}")
        with pytest.raises(NotStoredError, match="is a file, not a stored run"):
            resolve_run_ids(str(tmp_path / "a.json"), store)
        with pytest.raises(UnknownTagError):
            resolve_run_ids("tag:weekly", store)
    _register()

    def cli(*args: str):
        return CliRunner().invoke(app, list(args), catch_exceptions=False)

    out = cli("export", "tag:nightly", "bbbb", "--db", db, "--format", "json", "-o", "-")
    assert out.exit_code == 0, out.output
    assert [r["run_id"] for r in json.loads(out.stdout)] == ["aaaa1111", "aaaa2222", "bbbb3333"]
    one = cli("show", "aaaa2", "--db", db, "--json")
    assert one.exit_code == 0 and json.loads(one.stdout)["run_id"] == "aaaa2222"
    many = cli("show", "tag:nightly", "--db", db)
    assert (many.exit_code, many.stderr) == (
        2,
        "error: 'tag:nightly' names 2 runs; give one (a run id, or a file of one run)\n",
    )
