"""Golden test of the nccl-tests table layout: a format change must be deliberate.

To accept a deliberate change, regenerate with ``COMMLENS_UPDATE_GOLDEN=1 pytest tests/test_table_golden.py``
and review the diff of ``tests/data/golden/table.txt``.
"""

from __future__ import annotations

import os
from pathlib import Path

from commlens.results.records import Measurement
from commlens.results.table import (
    BenchRow,
    column_header_lines,
    footer_lines,
    op_header_line,
    row_line,
    run_table_lines,
)

GOLDEN = Path(__file__).parent / "data" / "golden" / "table.txt"
WORLD = 4


def _m(op: str, size_bytes: int, count: int, in_place: bool, samples_s: tuple[float, ...], **kw: object) -> Measurement:
    return Measurement(
        op=op, size_bytes=size_bytes, count=count, in_place=in_place, world_size=WORLD, samples_s=samples_s, **kw
    )  # type: ignore[arg-type]


def _rows() -> list[BenchRow]:
    ag = dict(dtype="float32", nwrong=0)
    return [
        # both placements: all_gather 1 MiB, 4 ranks
        BenchRow(
            op="all_gather",
            algo="builtin",
            dtype="float32",
            redop=None,
            root=None,
            size_bytes=1 << 20,
            count=65536,
            measurements=(
                _m("all_gather", 1 << 20, 65536, False, (100e-6, 110e-6, 120e-6, 130e-6), **ag),
                _m("all_gather", 1 << 20, 65536, True, (90e-6, 95e-6, 100e-6, 400e-6), **ag),
            ),
        ),
        # in-place only, a reduction with a root, unchecked: #wrong is N/A
        BenchRow(
            op="reduce",
            algo="builtin",
            dtype="bfloat16",
            redop="max",
            root=3,
            size_bytes=8,
            count=4,
            measurements=(None, _m("reduce", 8, 4, True, (12.5e-6, 13.25e-6), dtype="bfloat16", redop="max", root=3)),
        ),
        # out-of-place only, a long time (seconds), with wrong elements
        BenchRow(
            op="all_to_all",
            algo="builtin",
            dtype="int32",
            redop=None,
            root=None,
            size_bytes=1 << 30,
            count=1 << 28,
            measurements=(_m("all_to_all", 1 << 30, 1 << 28, False, (1.5, 2.5), dtype="int32", nwrong=7), None),
        ),
    ]


def _lines() -> list[str]:
    return run_table_lines(_rows(), 7, 123.456789e9)


def test_table_layout_matches_golden_file() -> None:
    text = "\n".join(_lines()) + "\n"
    if os.environ.get("COMMLENS_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_table_is_built_from_its_parts_and_columns_line_up() -> None:
    lines = _lines()
    rows = _rows()
    assert lines[:3] == column_header_lines()
    # each op's rows are introduced by a marker line, since the table has no op column
    assert [ln for ln in lines if ln.startswith("# Collective test:")] == [
        op_header_line("all_gather"),
        op_header_line("reduce"),
        op_header_line("all_to_all"),
    ]
    body = [ln for ln in lines[3:] if not ln.startswith("# Collective test:")]
    assert body[:3] == [row_line(r) for r in rows]
    assert body[3:] == footer_lines(7, 123.456789e9)
    # every column header and every row has the same width, so the columns line up
    assert len({len(line) for line in lines[1:3] + body[:3]}) == 1
    assert footer_lines(None, 0.0)[0] == "# Out of bounds values : N/A"
    assert footer_lines(0, 0.0)[0] == "# Out of bounds values : 0 OK"


def test_the_preamble_says_what_a_bench_sweep_ran_and_where() -> None:
    """The ``#`` lines above the table, from a bench run's settings as the run keeps them; settings that are not a
    bench sweep's (an ingested run's, whose ``ops`` may be its own) have no preamble."""
    from commlens.results.records import SystemInfo
    from commlens.results.table import SweepHeader, system_header_lines

    values: dict[str, object] = {
        "ops": ["all_reduce", "broadcast"],
        "dtypes": ["float32"],
        "min_bytes": 8,
        "max_bytes": 1024,
        "iters": 20,
        "warmup": 5,
        "check_iters": 1,
        "blocking": False,
        "algos": ["ring", "tree"],
        "chunk_bytes": 4096,
        "extra": {"tag": "t"},
    }
    sweep = SweepHeader.of(values)  # type: ignore[arg-type]
    assert sweep is not None
    system = SystemInfo(
        world_size=2,
        backend="gloo",
        backend_version="2.21",
        torch_version="2.13.0",
        commlens_version="0.9",
        device_names=("cpu", "cpu"),
        extra={"rank_hosts": ["h0", "h1"], "rank_pids": [11, 12]},
    )
    assert system_header_lines("0123456789abcdef0123456789abcdef", sweep, system) == [
        "# commlens 0.9 bench  run 0123456789ab",
        "# ops all_reduce,broadcast  dtypes float32  sizes 8..1024 B  iters 20  warmup 5  check 1  blocking 0"
        "  algos ring,tree  chunk 4096 B",
        "# backend gloo 2.21  device cpu  torch 2.13.0  world size 2",
        "#  Rank   0 Pid      11 on           h0 device cpu",
        "#  Rank   1 Pid      12 on           h1 device cpu",
        "#",
    ]
    builtin = SweepHeader.of({**values, "algos": ["builtin"], "blocking": True})  # type: ignore[arg-type]
    assert builtin is not None and system_header_lines("r" * 32, builtin, system)[1].endswith("blocking 1")
    assert SweepHeader.of({**values, "ops": ("all_reduce", "broadcast")}) == sweep  # as BenchConfig.as_dict() has it
    assert SweepHeader.of({"ops": ["all_reduce"], "nranks": 8}) is None  # an ingested PARAM run's settings
    assert SweepHeader.of({**values, "iters": "20"}) is None  # type: ignore[arg-type]
