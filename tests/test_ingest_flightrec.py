"""commlens.ingest.flightrec: every dump layout and form, missing ranks, and dumps as hostile input.

Fixtures: tests/data/flightrec_* (the tutorial's sample, layouts before 2.3, 2.3 pickle and 2.7 JSON written by
tests/scenarios/fr_layouts.py from PyTorch's writer layouts; a real gloo JSON recording by
tests/scenarios/fr_json.py) and tests/data/hang_* (real gloo pickles, tests/scenarios/fr_hang.py).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commlens.cli import diagnose_cmd  # noqa: F401  (registers the diagnose commands)
from commlens.cli.app import app
from commlens.diagnose.hang import diagnose_hang
from commlens.ingest import flightrec
from commlens.ingest.flightrec import DumpError, GroupConfig, read_dump, read_dump_dir

DATA = Path(__file__).parent / "data"


def _cli(*args: str):
    return CliRunner().invoke(app, ["diagnose", "hang", *args], catch_exceptions=False)


def _dump(path: Path, data: object) -> Path:
    path.write_bytes(pickle.dumps(data, protocol=2))
    return path


# --- the tutorial's sample -----------------------------------------------------------------------------------------


def test_tutorial_sample_is_read_as_published() -> None:
    ds = read_dump_dir(DATA / "flightrec_tutorial")
    assert ds.prefix == "trace_" and [d.rank for d in ds.dumps] == [0, 1] and ds.missing == {}
    d0 = ds.dumps[0]
    assert (d0.format, d0.version, d0.backend) == ("pickle", "2.5", "nccl")
    assert d0.groups == {"0": GroupConfig(name="0", desc="default_pg", ranks=(0, 1))}  # from the string "[0, 1]"
    third = d0.entries[2]
    assert (third.process_group, third.process_group_desc, third.collective_seq_id, third.op) == (
        "0",
        "default_pg",
        3,
        "all_reduce",
    )
    assert third.input_sizes == ((4, 5),) and third.input_dtypes == ("Float",) and third.state == "started"
    assert third.frames[-1] == "crash.py:44 in <module>"
    assert [len(d.entries) for d in ds.dumps] == [5, 4]


def test_tutorial_rank0s_extra_collective_is_named() -> None:
    """crash.py: rank 0 all-reduces an extra (4, 5) tensor; its later collectives are rank 1's, one number later."""
    report = diagnose_hang(DATA / "flightrec_tutorial")
    d = report.divergence
    assert d is not None and (d.kind, d.collective_seq_id, d.tied) == ("extra_collective", 3, False)
    assert d.expected["ranks"] == [1] and d.expected["input_sizes"] == [[3, 4]]
    [culprit] = d.culprits
    assert (culprit["rank"], culprit["input_sizes"]) == (0, [[4, 5]])
    assert [s.rank for s in report.suspects] == [0]
    assert any("an extra collective on 0" in n for n in report.notes)


def test_tutorial_set_with_rank1s_dump_lost_names_rank1(tmp_path: Path) -> None:
    shutil.copy(DATA / "flightrec_tutorial" / "trace_0", tmp_path / "trace_0")
    report = diagnose_hang(tmp_path)
    assert report.ranks == (0,) and report.expected_ranks == (0, 1) and report.ranks_without_dump == (1,)
    [suspect] = report.suspects
    assert (suspect.rank, suspect.reason) == (1, "no_dump")
    assert suspect.detail == (
        "no dump: the pg_config of group 0 (default_pg) lists it (1 of 1 dumps); its peers in "
        "group 0 reached collective 5 (all_reduce, scheduled on rank 0)"
    )
    result = _cli(str(tmp_path))
    assert result.exit_code == 1
    assert "suspect: rank 1, no dump: the pg_config of group 0 (default_pg) lists it (1 of 1 dumps)" in result.output
    out = json.loads(_cli(str(tmp_path), "--json").output)
    assert out["consistent"] is False and out["suspect_ranks"] == [1] and out["ranks_without_dump"] == [1]
    assert out["suspects"][0]["reason"] == "no_dump"


# --- every layout ---------------------------------------------------------------------------------------------------


def test_layout_before_2_3_seq_id_pg_id_no_dtypes_missing_rank_from_file_names() -> None:
    report = diagnose_hang(DATA / "flightrec_v1_1_nccl")
    assert report.versions == ("1.1",) and report.backend == "nccl"
    assert report.missing_evidence == {
        1: ("the file names run from nccl_trace_rank_0 to nccl_trace_rank_2 without nccl_trace_rank_1",)
    }
    assert [(s.rank, s.reason) for s in report.suspects] == [(1, "no_dump")] and report.divergence is None
    assert any("layouts before 2.3" in n for n in report.notes)
    entry = read_dump_dir(DATA / "flightrec_v1_1_nccl").dumps[0].entries[2]
    assert (entry.process_group, entry.collective_seq_id, entry.input_dtypes, entry.is_p2p) == ("0", 3, None, False)


def test_layout_2_3_pickle_with_list_ranks_and_a_size_mismatch() -> None:
    ds = read_dump_dir(DATA / "flightrec_v2_3_nccl")
    assert ds.dumps[0].groups["0"].ranks == (0, 1, 2, 3) and ds.missing == {}  # ranks as a list
    d = diagnose_hang(DATA / "flightrec_v2_3_nccl").divergence
    assert d is not None and (d.kind, d.collective_seq_id) == ("size_mismatch", 2)
    assert d.expected == {
        "op": "all_gather",
        "input_sizes": [[1024]],
        "input_dtypes": ["Float"],
        "ranks": [0, 1, 2],
        "frames": [
            "torch/distributed/distributed_c10d.py:2696 in all_gather",
            "torch/distributed/c10d_logger.py:83 in wrapper",
            "train.py:97 in <module>",
        ],
    }
    assert [(c["rank"], c["input_sizes"]) for c in d.culprits] == [(3, [[2048]])]


def test_layout_2_7_json_unsuffixed_p2p_left_out_rank_known_only_from_pg_config() -> None:
    ds = read_dump_dir(DATA / "flightrec_v2_7_json")
    d0 = ds.dumps[0]
    assert (d0.format, d0.version) == ("json", "2.7")
    assert [(e.op, e.is_p2p, e.process_group) for e in d0.entries] == [
        ("all_reduce", False, "0"),
        ("send", True, "1"),
        ("all_reduce", False, "0"),
    ]
    assert d0.entries[0].state == "completed" and d0.entries[2].state == "started"
    assert set(d0.groups) == {"0", "1"} and ds.dumps[2].groups["2"].ranks == (2, 3)
    assert ds.missing == {
        3: (
            "the pg_config of group 0 (default_pg) lists it (3 of 3 dumps)",
            "the pg_config of group 2 (tp) lists it (1 of 3 dumps)",
        )
    }
    report = diagnose_hang(DATA / "flightrec_v2_7_json")
    assert report.divergence is None and [s.rank for s in report.suspects] == [3]
    assert report.suspects[0].detail.endswith(
        "its peers in group 0 reached collective 2 (all_reduce, started on rank 0)"
    )
    assert _cli(str(DATA / "flightrec_v2_7_json")).exit_code == 1


def test_real_gloo_json_dumps() -> None:
    """torch 2.13's own _dump_fr_trace_json output: '' keyed pg_config, 0 for unset times, text pg_status."""
    ds = read_dump_dir(DATA / "flightrec_gloo_json")
    assert ds.prefix == "fr_trace_rank_" and [d.rank for d in ds.dumps] == [0, 1, 2]
    d1 = ds.dumps[1]
    assert (d1.format, d1.version, d1.backend) == ("json", "2.10", "gloo")
    assert d1.groups == {"0": GroupConfig(name="0", desc="default_pg", ranks=(0, 1, 2))}
    assert [e.op for e in d1.entries] == ["all_reduce", "broadcast", "all_reduce", "broadcast", "all_reduce", "barrier"]
    assert d1.entries[5].input_sizes == () and d1.entries[5].input_dtypes == ()
    d = diagnose_hang(DATA / "flightrec_gloo_json").divergence
    assert d is not None and (d.kind, d.collective_seq_id) == ("dtype_mismatch", 5)
    assert [(c["rank"], c["input_dtypes"]) for c in d.culprits] == [(2, ["Int"])]


def test_pickle_and_json_of_one_recording_read_the_same(tmp_path: Path) -> None:
    """The JSON recording re-pickled the way PyTorch's pickle writes it (tuples for process_group, None times)."""
    for src in sorted((DATA / "flightrec_gloo_json").glob("*.json")):
        data = json.loads(src.read_text())
        for e in data["entries"]:
            e["process_group"] = tuple(e["process_group"])
            e["time_discovered_started_ns"] = e["time_discovered_completed_ns"] = None
        _dump(tmp_path / src.stem, data)
    as_json = read_dump_dir(DATA / "flightrec_gloo_json")
    as_pickle = read_dump_dir(tmp_path)
    assert [d.format for d in as_pickle.dumps] == ["pickle"] * 3
    assert [d.entries for d in as_pickle.dumps] == [d.entries for d in as_json.dumps]
    assert [d.groups for d in as_pickle.dumps] == [d.groups for d in as_json.dumps]


# --- dumps are untrusted data --------------------------------------------------------------------------------------


class _RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_would_run_a_command_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    bad = _dump(dumps / "nccl_trace_rank_0", {"version": "2.5", "entries": [], "payload": _RunsACommand(marker)})
    with pytest.raises(
        DumpError,
        match=r"nccl_trace_rank_0: not a readable Flight Recorder dump .*refused to load "
        r"(posix|os)\.system",
    ):
        read_dump(bad)
    result = _cli(str(dumps))
    assert result.exit_code == 2 and f"error: {bad}: not a readable Flight Recorder dump" in result.stderr
    assert not marker.exists()


def test_bounds_size_depth_and_shared_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = DATA / "hang_healthy" / "fr_trace_rank_0"
    with pytest.raises(DumpError, match=r"fr_trace_rank_0: 2,312 bytes, over the 1,000-byte limit"):
        read_dump(real, 0, max_bytes=1000)
    deep = tmp_path / "deep_0"
    deep.write_text('{"version": "2.5", "entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(DumpError, match=r"deep_0: nested (too deeply|deeper than 12 levels)"):
        read_dump(deep, 0)
    nested = tmp_path / "nested_0"
    nested.write_text('{"version": "2.5", "entries": ' + "[" * 20 + "]" * 20 + "}")
    with pytest.raises(DumpError, match=r"nested_0: nested deeper than 12 levels"):
        read_dump(nested, 0)
    shared: list[object] = [0] * 100
    for _ in range(4):  # 100**5 values once expanded, four levels deep, about a kilobyte pickled
        shared = [shared] * 100
    bomb = _dump(tmp_path / "bomb_0", {"version": "2.5", "x": shared})
    monkeypatch.setattr(flightrec, "_MAX_NODES", 10_000)
    with pytest.raises(DumpError, match=r"bomb_0: more than 10,000 values"):
        read_dump(bomb, 0)
    assert _cli(str(DATA / "hang_healthy"), "--max-dump-mib", "1").exit_code == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "not a Flight Recorder dump (no 'version')"),
        ({"version": "v2", "entries": []}, "field 'version' is 'v2', not 'MAJOR.MINOR'"),
        (
            {"version": "2.5", "entries": [{"profiling_name": "nccl:all_reduce", "collective_seq_id": 1}]},
            "entry 0 lacks input_sizes",
        ),
        (
            {
                "version": "2.5",
                "entries": [
                    {
                        "profiling_name": "nccl:all_reduce",
                        "collective_seq_id": "x",
                        "input_sizes": [],
                        "process_group": ("0", ""),
                    }
                ],
            },
            "entry 0: collective_seq_id is 'x', not an integer",
        ),
        (
            {"version": "2.5", "entries": [], "pg_config": {"0": {"name": "0", "desc": "", "ranks": "[0, one]"}}},
            "pg_config['0'].ranks is '[0, one]', not a list of ranks",
        ),
        ({"version": "2.5", "entries": [], "rank": 3}, "the dump says rank 3, its name says rank 0"),
    ],
)
def test_bad_dumps_are_refused_naming_file_and_field(tmp_path: Path, data: object, message: str) -> None:
    path = _dump(tmp_path / "trace_0", data)
    with pytest.raises(DumpError) as e:
        read_dump_dir(tmp_path)
    assert str(e.value) == f"{path}: {message}"
    result = _cli(str(tmp_path))
    assert result.exit_code == 2 and result.stderr == f"error: {path}: {message}\n"


def test_file_names_prefixes_and_duplicates(tmp_path: Path) -> None:
    src = DATA / "flightrec_tutorial"
    shutil.copy(src / "trace_0", tmp_path / "trace_0")
    shutil.copy(src / "trace_1", tmp_path / "trace_1.pkl")
    (tmp_path / "README.md").write_text("not a dump")
    assert [d.rank for d in read_dump_dir(tmp_path).dumps] == [0, 1]
    shutil.copy(src / "trace_1", tmp_path / "other_1")
    with pytest.raises(DumpError, match=r"files of several prefixes \('other_', 'trace_'\); name the dumps' prefix"):
        read_dump_dir(tmp_path)
    assert [d.rank for d in read_dump_dir(tmp_path, prefix="trace_").dumps] == [0, 1]
    assert _cli(str(tmp_path), "--prefix", "trace_").exit_code == 1  # rank 0's extra collective
    shutil.copy(src / "trace_1", tmp_path / "trace_1")
    with pytest.raises(DumpError, match=r"more than one dump for rank\(s\) \[1\]"):
        read_dump_dir(tmp_path, prefix="trace_")


def test_only_active_dumps_two_faulty_ranks_in_two_groups_both_named() -> None:
    """NVRx's collector's shape (layout 2.9, active entries only): ranks 1 and 3 never queued their all-to-all."""
    report = diagnose_hang(DATA / "flightrec_v2_9_active")
    assert report.versions == ("2.9",) and report.ranks == (0, 1, 2, 3) and report.ranks_without_dump == ()
    assert [
        (d.process_group, d.kind, d.collective_seq_id, [c["rank"] for c in d.culprits]) for d in report.divergences
    ] == [("72", "missing_ranks", 45265, [1]), ("73", "missing_ranks", 45265, [3])]
    assert report.divergences[0].culprits[0]["last_collective_seq_id"] is None
    assert [(s.rank, s.reason) for s in report.suspects] == [(1, "missing_ranks"), (3, "missing_ranks")]
    assert report.suspects[0].detail == (
        "missing_ranks at collective 45265 of group 72: issued nothing (no earlier one in its dump)"
    )
    assert any(n.startswith("3 group(s) compared from a later collective than 1") for n in report.notes)
    result = _cli(str(DATA / "flightrec_v2_9_active"))
    assert result.exit_code == 1
    assert (
        "rank  issued                                sizes  dtypes  where (innermost first)\n"
        "   1  nothing (no earlier one in its dump)  -      -       -\n"
        "culprit rank(s): 1\n"
    ) in result.output
    assert result.output.endswith("suspects (first is likeliest): 1,3\n")
    out = json.loads(_cli(str(DATA / "flightrec_v2_9_active"), "--json").output)
    assert [d["culprit_ranks"] for d in out["divergences"]] == [[1], [3]] and out["suspect_ranks"] == [1, 3]
