"""Write the NCCL Flight Recorder fixtures of tests/data/flightrec_*/ (no GPU here, so they are written, not recorded).

    python tests/scenarios/fr_layouts.py tests/data

Each fixture reproduces the layout PyTorch's writer of that ``version``
produces, field for field (names, nesting, types, the quirks of each form);
each folder gets a README.md saying what it holds and where its layout comes
from (SOURCES below). The gloo
fixtures (hang_*, flightrec_gloo_json) are real recordings instead
(fr_hang.py, fr_json.py).
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

T0_NS = 1724779239936775119  # the tutorial sample's first time_created_ns
STEP_NS = 1_000_000


def _frames(script: str, line: int, op: str = "all_reduce") -> list[dict[str, Any]]:
    return [
        {"name": op, "filename": "torch/distributed/distributed_c10d.py", "line": 2696},
        {"name": "wrapper", "filename": "torch/distributed/c10d_logger.py", "line": 83},
        {"name": "<module>", "filename": script, "line": line},
    ]


def entry_v2(
    record_id: int,
    seq: int,
    op: str,
    sizes: list[list[int]],
    state: str,
    *,
    pg: tuple[str, str] = ("0", "default_pg"),
    pg_id: int = 0,
    p2p_seq: int = 0,
    dtype: str = "Float",
    script: str = "crash.py",
    line: int = 44,
    p2p: bool = False,
    json_form: bool = False,
) -> dict[str, Any]:
    """An entry as getCollectiveTrace (pickle) / get_dump_json (JSON) write it, layouts 2.3 to 2.9."""
    created = T0_NS + record_id * STEP_NS
    started = created + 10_000 if state in ("started", "completed") else None
    completed = created + 40_000 if state == "completed" else None
    e: dict[str, Any] = {} if json_form else {"frames": _frames(script, line, op.split(" ")[0])}
    e.update(
        {
            "record_id": record_id,
            "pg_id": pg_id,
            "process_group": list(pg) if json_form else pg,
            "collective_seq_id": seq,
            "p2p_seq_id": p2p_seq,
            "op_id": record_id + 1,
            "profiling_name": f"nccl:{op}",
            "time_created_ns": created,
            "input_sizes": sizes,
            "input_dtypes": [dtype] * len(sizes),
            "output_sizes": sizes,
            "output_dtypes": [dtype] * len(sizes),
            "state": state,
            # JSON writes 0 where pickle writes None
            "time_discovered_started_ns": started if started is not None else (0 if json_form else None),
            "time_discovered_completed_ns": completed if completed is not None else (0 if json_form else None),
            "retired": state == "completed",
            "timeout_ms": 1000 if script == "crash.py" else 600000,
            "is_p2p": p2p,
        }
    )
    return e


def pg_status(last_enqueued: int, last_started: int, last_completed: int, json_form: bool = False) -> dict[str, Any]:
    values = {
        "last_enqueued_collective": last_enqueued,
        "last_started_collective": last_started,
        "last_completed_collective": last_completed,
    }
    return {k: str(v) for k, v in values.items()} if json_form else values


SOURCES = {
    "flightrec_tutorial": "the sample dump and the crash.py example of PyTorch's Flight Recorder tutorial "
    "(pytorch/tutorials prototype_source/flight_recorder_tutorial.rst): its unpickled dump "
    "(version 2.5, keys and their order, process_group as a tuple, pg_config ranks as the "
    'string "[0, 1]", pg_status), its file names /tmp/trace_0 and /tmp/trace_1, and the '
    "collectives crash.py issues per rank.",
    "flightrec_v1_1_nccl": "the key list of TraceUtils.h before version 2.3 (seq_id, pg_id, op_id, profiling_name, "
    "time_created_ns, input_sizes, output_sizes, state, time_discovered_*, retired, frames; "
    "dump keys entries and version only), as read from PyTorch 2.2's source. No copy of "
    "that header was found in the search index to check it against again, and the exact "
    "version string of that era (1.0 or 1.1) is not confirmed: the reader does not depend "
    "on it (fields are read by presence).",
    "flightrec_v2_3_nccl": "NCCLTraceBuffer::dump and getCollectiveTrace in NCCLUtils.hpp at version_val 2.3 (a "
    "public copy of PyTorch's header): entry keys frames, record_id, pg_id, process_group "
    "(tuple), collective_seq_id, p2p_seq_id, op_id, profiling_name, time_created_ns, "
    "input_sizes, input_dtypes, output_sizes, output_dtypes, state, time_discovered_*, "
    "retired, timeout_ms, is_p2p; dump keys version, pg_config, pg_status, entries. "
    "pg_config ranks are a list here on purpose (the reader's other accepted shape).",
    "flightrec_v2_7_json": "FlightRecorder::get_dump_json in FlightRecorder.hpp at version_val 2.7 (a public copy "
    "of PyTorch's header): process_group as a JSON list, time_discovered_* written 0 when "
    "unset, pg_status values as strings, no frames, nccl_version beside version, files "
    "named like the pickle ones (no .json suffix).",
    "flightrec_v2_9_active": "the per-rank pickles NVIDIA's nvidia-resiliency-ext publishes as test data "
    "(tests/attribution/unit/fr_traces/*/_dump_<rank>, 16 ranks, version 2.9): file "
    "names _dump_<rank>, dump keys version, pg_config, nccl_version ('2.27.3'), pg_status, "
    "entries; only active entries (all scheduled, retired False, no frames), keys in the "
    "order record_id, pg_id, process_group, thread_name, thread_id, collective_seq_id, ...; "
    "Megatron group descs. Group names, sizes and sequence numbers here are smaller.",
}


def readme(d: Path, doc: str | None) -> None:
    text = (doc or "").strip()
    (d / "README.md").write_text(
        f"# {d.name}\n\nWritten by tests/scenarios/fr_layouts.py, not recorded (no GPU "
        f"here).\n\n{text}\n\nLayout from: {SOURCES[d.name]}\n"
    )


def tutorial(out: Path) -> None:
    """The tutorial's crash.py under torchrun --nproc_per_node=2: rank 0 does one extra all_reduce of a (4, 5) tensor.

    Files /tmp/trace_0 and /tmp/trace_1 (TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/tmp/trace_), version 2.5, pg_config
    ranks "[0, 1]", timeout 1 s. Rank 0: all_reduce #1, #2 of (3, 4) done, #3 (4, 5) stuck, #4, #5 (3, 4) queued.
    Rank 1: #1, #2 done, #3 (3, 4) stuck (matched on the wire with rank 0's (4, 5)), #4 queued.
    """
    d = out / "flightrec_tutorial"
    d.mkdir(parents=True, exist_ok=True)
    readme(d, tutorial.__doc__)
    plans = {
        0: [
            ((3, 4), "completed", 38),
            ((3, 4), "completed", 38),
            ((4, 5), "started", 44),
            ((3, 4), "scheduled", 48),
            ((3, 4), "scheduled", 48),
        ],
        1: [((3, 4), "completed", 38), ((3, 4), "completed", 38), ((3, 4), "started", 48), ((3, 4), "scheduled", 48)],
    }
    for rank, plan in plans.items():
        entries = [
            entry_v2(i, i + 1, "all_reduce", [list(shape)], state, line=line)
            for i, (shape, state, line) in enumerate(plan)
        ]
        dump = {
            "version": "2.5",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {"0": pg_status(len(plan), 3, 2)},
            "entries": entries,
        }
        (d / f"trace_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def v1_layout(out: Path) -> None:
    """The layout before 2.3 (PyTorch 2.2): seq_id, pg_id, no process_group, dtypes, is_p2p or pg_config.

    3 ranks; rank 1's dump is missing (file names nccl_trace_rank_0 and _2).
    """
    d = out / "flightrec_v1_1_nccl"
    d.mkdir(parents=True, exist_ok=True)
    readme(d, v1_layout.__doc__)
    for rank in (0, 2):
        entries = []
        for i in range(3):
            state = "completed" if i < 2 else "started"
            created = T0_NS + i * STEP_NS
            entries.append(
                {
                    "pg_id": 0,
                    "seq_id": i + 1,
                    "op_id": i + 1,
                    "profiling_name": "nccl:all_reduce",
                    "time_created_ns": created,
                    "input_sizes": [[1024, 1024]],
                    "output_sizes": [[1024, 1024]],
                    "state": state,
                    "time_discovered_started_ns": created + 10_000,
                    "time_discovered_completed_ns": created + 40_000 if state == "completed" else None,
                    "retired": state == "completed",
                    "frames": _frames("train.py", 120),
                }
            )
        dump = {"entries": entries, "version": "1.1"}
        (d / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def v2_3_layout(out: Path) -> None:
    """Layout 2.3 (pickle), 4 ranks, a data-parallel group; rank 3 all-gathers a shard of another size.

    pg_config ranks are written as a list here (the other shape the reader accepts), not PyTorch's string.
    """
    d = out / "flightrec_v2_3_nccl"
    d.mkdir(parents=True, exist_ok=True)
    readme(d, v2_3_layout.__doc__)
    for rank in range(4):
        entries = [
            entry_v2(0, 1, "all_reduce", [[4096]], "completed", script="train.py", line=88),
            entry_v2(1, 2, "all_gather", [[2048 if rank == 3 else 1024]], "started", script="train.py", line=97),
        ]
        dump = {
            "version": "2.3",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": [0, 1, 2, 3]}},
            "pg_status": {"0": pg_status(2, 2, 1)},
            "entries": entries,
        }
        (d / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def v2_7_json(out: Path) -> None:
    """Layout 2.7 in JSON (get_dump_json): 4 ranks, rank 3 wrote nothing; a tensor-parallel group with p2p traffic.

    Files nccl_trace_rank_0..2 hold JSON though unsuffixed (the writer uses one name for both forms). Only the
    pg_config shows rank 3 (the file names end at 2).
    """
    d = out / "flightrec_v2_7_json"
    d.mkdir(parents=True, exist_ok=True)
    readme(d, v2_7_json.__doc__)
    tp = {0: ("1", "tp", [0, 1]), 1: ("1", "tp", [0, 1]), 2: ("2", "tp", [2, 3])}
    for rank in range(3):
        name, desc, ranks = tp[rank]
        entries = [
            entry_v2(0, 1, "all_reduce", [[8192]], "completed", script="train.py", line=60, json_form=True),
            entry_v2(
                1,
                1,
                "send 0->1" if rank % 2 == 0 else "recv 1<-0",
                [[512]],
                "completed",
                pg=(name, desc),
                pg_id=1,
                p2p_seq=1,
                p2p=True,
                script="train.py",
                line=71,
                json_form=True,
            ),
            entry_v2(2, 2, "all_reduce", [[8192]], "started", script="train.py", line=60, json_form=True),
        ]
        dump = {
            "version": "2.7",
            "nccl_version": "2.21.5",
            "pg_config": {
                "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                name: {"name": name, "desc": desc, "ranks": json.dumps(ranks)},
            },
            "pg_status": {"0": pg_status(2, 2, 1, json_form=True), "1": pg_status(0, -1, 0, json_form=True)},
            "entries": entries,
        }
        (d / f"nccl_trace_rank_{rank}").write_text(json.dumps(dump))


def v2_9_only_active(out: Path) -> None:
    """Layout 2.9, only active collectives dumped (NVRx's collector): 4 ranks, ranks 1 and 3 stopped enqueueing.

    Every rank's tensor-parallel reduce-scatter #88683 is still queued; ranks 0 and 2 also queued the all-to-all
    #45265 of their expert-parallel group (72 = ranks 0,1; 73 = ranks 2,3) that ranks 1 and 3 never issued.
    """
    d = out / "flightrec_v2_9_active"
    d.mkdir(parents=True, exist_ok=True)
    readme(d, v2_9_only_active.__doc__)
    groups = {
        "0": ("default_pg", [0, 1, 2, 3]),
        "37": ("TENSOR_MODEL_PARALLEL_GROUP", [0, 1, 2, 3]),
        "72": ("EXPERT_MODEL_PARALLEL_GROUP", [0, 1]),
        "73": ("EXPERT_MODEL_PARALLEL_GROUP", [2, 3]),
    }
    pg_ids = {"37": 5, "72": 9, "73": 10}

    def active(record_id: int, pg: str, seq: int, op: str, sizes: list[list[int]]) -> dict[str, Any]:
        return {
            "record_id": record_id,
            "pg_id": pg_ids[pg],
            "process_group": (pg, groups[pg][0]),
            "thread_name": "python3",
            "thread_id": "23456244340032",
            "collective_seq_id": seq,
            "p2p_seq_id": 0,
            "op_id": seq + 11000,
            "profiling_name": f"nccl:{op}",
            "time_created_ns": T0_NS + record_id * STEP_NS,
            "input_sizes": sizes,
            "input_dtypes": ["BFloat16"] * len(sizes),
            "output_sizes": sizes,
            "output_dtypes": ["BFloat16"] * len(sizes),
            "state": "scheduled",
            "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None,
            "retired": False,
            "timeout_ms": 180000,
            "is_p2p": False,
        }

    for rank in range(4):
        ep = "72" if rank < 2 else "73"
        entries = [active(86670, "37", 88683, "_reduce_scatter_base", [[8192, 1, 5120]])]
        if rank in (0, 2):
            entries.append(active(86671, ep, 45265, "all_to_all", [[2048 + 100 * rank, 5120]]))
        config = {
            name: {"name": name, "desc": desc, "ranks": str(ranks)}
            for name, (desc, ranks) in groups.items()
            if rank in ranks
        }
        status = {
            str(pg_ids.get(n, 0)): pg_status(
                88683 if n == "37" else 45265 if rank in (0, 2) else 45264, -1, 88682 if n == "37" else 45264
            )
            for n in config
        }
        dump = {
            "version": "2.9",
            "pg_config": config,
            "nccl_version": "2.27.3",
            "pg_status": status,
            "entries": entries,
        }
        (d / f"_dump_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
    for write in (tutorial, v1_layout, v2_3_layout, v2_7_json, v2_9_only_active):
        write(target)
