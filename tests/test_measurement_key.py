"""The measurement key as a named type, and no sentinels in memory: an op without a reduction or a root holds
None, and only the edges (nccl-tests' table and -J JSON, the result store's columns, commlens.run/1 and /2
files) speak nccl-tests' ``none`` and ``-1``."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from store_backends import make_measurement, make_run, pg_server, pg_url, store_url  # noqa: F401

from commlens.results import FormatError, Measurement, MeasurementKey, RecordError, Run, SystemInfo, run_to_dict
from commlens.results.jsonfmt import load_run
from commlens.results.nccltests_json import run_to_nccl_tests_json
from commlens.results.table import BenchRow, row_line
from commlens.store import Store
from commlens.store.export import export_runs
from commlens.store.noise import NoiseFloor

WORLD = 4


def _m(op: str, **kw: object) -> Measurement:
    fields: dict[str, object] = dict(
        dtype="float32", size_bytes=1024, count=256, in_place=False, world_size=WORLD, samples_s=(1e-5, 2e-5)
    )
    fields.update(kw)
    return Measurement(op=op, **fields)  # type: ignore[arg-type]


def _run(*ms: Measurement) -> Run:
    return Run(
        run_id="k" * 32,
        started_at="2025-06-01T00:00:00+00:00",
        system=SystemInfo(world_size=WORLD, backend="gloo"),
        measurements=ms,
    )


def test_the_key_names_its_fields_and_none_stands_for_no_reduction_or_root() -> None:
    ag, bc = _m("all_gather"), _m("broadcast", root=2, in_place=True)
    assert ag.key == MeasurementKey("all_gather", "builtin", "float32", None, None, 1024, False)
    assert (bc.key.redop, bc.key.root, bc.key.in_place) == (None, 2, True)
    assert (ag.redop, ag.root) == (None, None)
    # ordered op, algo, dtype, redop, root, placement, then size
    keys = [_m("all_reduce", redop="sum", size_bytes=s, in_place=p).key for s in (4096, 1024) for p in (True, False)]
    assert [(k.in_place, k.size_bytes) for k in sorted(keys, key=MeasurementKey.order)] == [
        (False, 1024),
        (False, 4096),
        (True, 1024),
        (True, 4096),
    ]


@pytest.mark.parametrize(
    ("op", "kw", "message"),
    [
        ("all_gather", {"redop": "none"}, "all_gather does not reduce: redop must be None"),
        ("all_reduce", {"redop": "none"}, "all_reduce: redop 'none' is no reduction (None means none)"),
        ("all_reduce", {}, "all_reduce reduces: redop must be given"),
        ("broadcast", {"root": -1}, "root must be None (no root) or a rank < 1048576, got -1"),
    ],
)
def test_a_sentinel_is_refused_when_built(op: str, kw: dict[str, object], message: str) -> None:
    with pytest.raises(RecordError, match=f"^{re.escape(message)}$"):
        _m(op, **kw)


def test_version_3_writes_null_and_reads_it_back(tmp_path: Path) -> None:
    run = _run(_m("all_gather"), _m("all_reduce", redop="sum"), _m("broadcast", root=1))
    d = run_to_dict(run)
    assert d["format"] == "commlens.run/5"
    assert [(m["redop"], m["root"]) for m in d["measurements"]] == [(None, None), ("sum", None), (None, 1)]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(d))
    assert load_run(path) == run


@pytest.mark.parametrize("version", [1, 2])
def test_a_version_1_or_2_file_with_none_and_minus_one_is_upgraded(tmp_path: Path, version: int) -> None:
    run = _run(_m("all_gather"), _m("all_reduce", redop="sum"), _m("broadcast", root=0))
    d = run_to_dict(run)
    d["format"] = f"commlens.run/{version}"
    for m in d["measurements"]:
        m["redop"] = "none" if m["redop"] is None else m["redop"]
        m["root"] = -1 if m["root"] is None else m["root"]
    d["measurements"][1]["root"] = -1.0  # an integral float read as -1 before version 3
    del d["measurements"][0]["redop"]  # a missing redop meant none
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    assert load_run(path) == run


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("redop", "none", "all_gather does not reduce: redop must be None"),
        ("root", -1, "root must be None (no root) or a rank < 1048576, got -1"),
        ("redop", 3, "redop: expected a string or null, got 3"),
        ("root", "0", "root: expected an integer, got '0'"),
    ],
)
def test_a_version_3_file_holds_no_sentinels(tmp_path: Path, field: str, value: object, message: str) -> None:
    d = run_to_dict(_run(_m("all_gather")))
    d["measurements"][0][field] = value
    path = tmp_path / "run.json"
    path.write_text(json.dumps(d))
    with pytest.raises(FormatError, match=f"^{re.escape(f'{path}: {message}')}$"):
        load_run(path)


def test_nccl_tests_table_and_json_print_none_and_minus_one() -> None:
    ag = _m("all_gather", nwrong=0)
    row = BenchRow(
        op="all_gather",
        algo="builtin",
        dtype="float32",
        redop=None,
        root=None,
        size_bytes=1024,
        count=256,
        measurements=(),
    )
    assert row_line(row).split()[:5] == ["1024", "256", "float32", "none", "-1"]
    doc = run_to_nccl_tests_json(_run(ag, _m("broadcast", root=3)))
    assert [(r["redop"], r["root"]) for r in doc["results"]] == [("none", "    -1"), ("none", "     3")]


def test_the_store_keeps_none_and_the_csv_says_none_and_minus_one(store_url: str, tmp_path: Path) -> None:  # noqa: F811
    run = dataclasses.replace(
        make_run("n1"), measurements=(make_measurement("all_gather"), make_measurement("broadcast", root=1))
    )
    with Store.open(store_url) as store:
        store.save_run(run)
        (back,) = store.get_runs(["n1"])
        rows = store.measurement_rows()
    assert back == run
    assert [(r.key.redop, r.key.root) for r in rows] == [(None, None), (None, 1)]
    assert [r.key for r in rows] == [m.key for m in run.measurements]
    out = tmp_path / "runs.csv"
    export_runs([run], out, "csv")
    header, *lines = out.read_text().splitlines()
    cols = header.split(",")
    assert [(line.split(",")[cols.index("redop")], line.split(",")[cols.index("root")]) for line in lines] == [
        ("none", "-1"),
        ("none", "1"),
    ]


def test_a_series_without_reduction_or_root_has_one_floor(store_url: str) -> None:  # noqa: F811
    """NULL would be distinct from NULL in the floors' unique key: the store keeps its none/-1 encoding."""

    def floor(sd_log: float) -> NoiseFloor:
        return NoiseFloor(
            "fp",
            MeasurementKey("all_gather", "builtin", "float32", None, None, 1024, False),
            sd_log,
            4,
            2,
            "2025-06-01",
        )

    with Store.open(store_url) as store:
        store.floors.save([floor(0.05)])
        store.floors.save([floor(0.02)])
        assert store.floors.list() == [floor(0.02)]
        assert store.floors.load() == {floor(0.02).series: 0.02}
