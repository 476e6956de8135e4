"""A measurement's rounds (``bench --rounds``): checked when built, kept by the JSON format (commlens.run/2,
older files still read) and by the store on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from store_backends import make_measurement, make_run, pg_server, pg_url, store_url  # noqa: F401

from commlens.results import (
    FORMAT,
    FormatError,
    Measurement,
    RecordError,
    load_run,
    run_from_dict,
    run_to_dict,
)
from commlens.results.jsonfmt import MAX_ROUNDS
from commlens.store import Store

SAMPLES = (1e-5, 2e-5, 3e-5, 4e-5, 5e-5, 6e-5)


def test_rounds_split_the_samples_in_order() -> None:
    m = make_measurement(samples_s=SAMPLES, rounds=[2, 3, 1])
    assert m.rounds == (2, 3, 1)  # a list given is kept as a tuple: the record stays immutable
    assert m.round_count == 3
    assert m.round_samples() == [(1e-5, 2e-5), (3e-5, 4e-5, 5e-5), (6e-5,)]
    one = make_measurement(samples_s=SAMPLES)
    assert (one.rounds, one.round_count, one.round_samples()) == (None, 1, [SAMPLES])


@pytest.mark.parametrize(
    ("rounds", "message"),
    [
        ((2, 3), "all_reduce 1024 B: rounds hold 5 samples, the row has 6"),
        ((3, 3, 1), "all_reduce 1024 B: rounds hold 7 samples, the row has 6"),
        ((), "all_reduce 1024 B: rounds must be sample counts >= 1"),
        ((6, 0), "all_reduce 1024 B: rounds must be sample counts >= 1"),
        ((7, -1), "all_reduce 1024 B: rounds must be sample counts >= 1"),
        ((True, 5), "all_reduce 1024 B: rounds must be sample counts >= 1"),
        ((3.0, 3), "all_reduce 1024 B: rounds must be sample counts >= 1"),
    ],
)
def test_rounds_that_do_not_count_the_samples_are_refused(rounds: tuple, message: str) -> None:
    with pytest.raises(RecordError) as info:
        make_measurement(samples_s=SAMPLES, rounds=rounds)
    assert str(info.value) == message


def _run_dict(**rounds_of_first: Any) -> dict[str, Any]:
    d = json.loads(json.dumps(run_to_dict(make_run("r1"))))  # as a file holds it
    d["measurements"][0].update(rounds_of_first)
    return d


def test_json_keeps_the_rounds_and_reads_them_back(tmp_path: Path) -> None:
    base = make_run("r1")
    ms = (
        Measurement(**{**base.measurements[0].__dict__, "samples_s": SAMPLES, "rounds": (3, 3)}),
        *base.measurements[1:],
    )
    run = type(base)(**{**base.__dict__, "measurements": ms})
    d = run_to_dict(run)
    assert d["format"] == FORMAT == "commlens.run/5"
    assert d["measurements"][0]["rounds"] == [3, 3]
    assert "rounds" not in d["measurements"][1]  # one round: nothing written
    path = tmp_path / "run.json"
    path.write_text(json.dumps(d))
    back = load_run(path)
    assert back == run
    assert (back.measurements[0].rounds, back.measurements[1].rounds) == ((3, 3), None)


def test_a_version_1_file_still_loads_as_one_round_per_row(tmp_path: Path) -> None:
    d = run_to_dict(make_run("old1"))
    d["format"] = "commlens.run/1"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    run = load_run(path)
    assert run == make_run("old1")
    assert [m.rounds for m in run.measurements] == [None, None]
    assert [m.round_count for m in run.measurements] == [1, 1]


@pytest.mark.parametrize(
    ("rounds", "message"),
    [
        ("2", "rounds: expected a list of at most 10000 sample counts, got '2'"),
        (2, "rounds: expected a list of at most 10000 sample counts, got 2"),
        ({"a": 2}, "rounds: expected a list of at most 10000 sample counts, got "),
        ([True, True], "rounds: expected a list of at most 10000 sample counts, got "),
        ([1.0, 1.0], "rounds: expected a list of at most 10000 sample counts, got "),
        (["1", "1"], "rounds: expected a list of at most 10000 sample counts, got "),
        ([1] * (MAX_ROUNDS + 1), "rounds: expected a list of at most 10000 sample counts, got "),
        ([3, -1], "all_reduce 1024 B: rounds must be sample counts >= 1"),
        ([2, 0], "all_reduce 1024 B: rounds must be sample counts >= 1"),
        ([], "all_reduce 1024 B: rounds must be sample counts >= 1"),
        ([1, 2], "all_reduce 1024 B: rounds hold 3 samples, the row has 2"),
        ([10**30], "all_reduce 1024 B: rounds hold 1000000000000000000000000000000 samples, the row has 2"),
    ],
)
def test_hostile_rounds_in_a_file_are_a_format_error(rounds: Any, message: str) -> None:
    with pytest.raises(FormatError) as info:
        run_from_dict(_run_dict(rounds=rounds))
    assert str(info.value).startswith(message)
    assert len(str(info.value)) < 300  # a huge value is shown shortened, not in full


def test_null_rounds_in_a_file_is_one_round() -> None:
    assert run_from_dict(_run_dict(rounds=None)).measurements[0].rounds is None


def test_the_store_keeps_the_rounds(store_url: str) -> None:
    base = make_run("rounds01")
    first = Measurement(**{**base.measurements[0].__dict__, "samples_s": SAMPLES, "rounds": (1, 2, 3)})
    run = type(base)(**{**base.__dict__, "measurements": (first, *base.measurements[1:])})
    with Store.open(store_url) as store:
        store.save_runs([run, make_run("plain001")])
    with Store.open(store_url) as store:
        back = store.get_run("rounds01")
        assert back == run
        assert [m.rounds for m in back.measurements] == [(1, 2, 3), None]
        assert back.measurements[0].round_samples() == [(1e-5,), (2e-5, 3e-5), (4e-5, 5e-5, 6e-5)]
        assert [m.rounds for m in store.get_run("plain001").measurements] == [None, None]
