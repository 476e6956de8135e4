"""Plans from Chakra host execution traces in their JSON form (PyTorch's ``ExecutionTraceObserver``).

What a host trace gives: every ``record_param_comms`` node in the order the host issued it (node ids),
with ``collective_name``, ``dtype``, ``in_msg_nelems``, ``pg_name`` and ``pg_size`` attributes (schema
1.1.0 and later), and the ``## process_group:init ##`` node listing each group's ranks. What it does
not: any time. A host trace has no start or duration, so a plan from it has durations and gaps of 0 and
replays back to back; its comparison has nothing recorded to compare with. Nor does it name its rank:
the rank is taken from the file name (the last number in ``rank-3.json``, ``et_3.json.gz``).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from commlens.ingest.files import read_capped
from commlens.ops import OPS
from commlens.replay.extract import KINETO_DTYPES
from commlens.replay.plan import MAX_PLAN_BYTES, PlanCall, PlanGroup, RankCalls, ReplayPlan, ReplayPlanError

__all__ = ["plan_from_chakra"]

_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "allgatherintotensor": "all_gather",
    "allgatherbase": "all_gather",
    "reducescatter": "reduce_scatter",
    "reducescattertensor": "reduce_scatter",
    "reducescatterbase": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "alltoallbase": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv",
}
_SKIPPED = ("wait", "init", "")
_RANK_RE = re.compile(r"(\d+)(?!.*\d)")


def _load(path: Path) -> list[Any]:
    """The trace's ``nodes`` list (each node still to be checked where it is used)."""
    try:
        data = read_capped(path, MAX_PLAN_BYTES, gunzip=True)
    except (OSError, EOFError, zlib.error) as e:
        raise ReplayPlanError(f"{path}: cannot read ({type(e).__name__}: {e})") from None
    if data is None:
        raise ReplayPlanError(f"{path}: more than {MAX_PLAN_BYTES} bytes of JSON: refused")
    try:
        top = json.loads(data)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise ReplayPlanError(f"{path}: not JSON ({type(e).__name__})") from None
    if not isinstance(top, dict) or not isinstance(top.get("nodes"), list):
        raise ReplayPlanError(f"{path}: not a Chakra host execution trace (no nodes list)")
    nodes: list[Any] = top["nodes"]
    return nodes


def _attrs(node: Mapping[str, object]) -> dict[str, object]:
    attrs = node.get("attrs")
    if not isinstance(attrs, list):
        return {}
    return {a["name"]: a.get("value") for a in attrs if isinstance(a, dict) and isinstance(a.get("name"), str)}


def _groups(nodes: list[Any], path: Path) -> dict[str, tuple[int, ...]]:
    for node in nodes:
        if isinstance(node, dict) and "process_group:init" in str(node.get("name", "")):
            values = node.get("inputs", {}).get("values") if isinstance(node.get("inputs"), dict) else None
            if not isinstance(values, list) or not values or not isinstance(values[0], str):
                break
            try:
                pgs = json.loads(values[0])
            except ValueError:
                raise ReplayPlanError(f"{path}: the process_group:init node's group list is not JSON") from None
            out: dict[str, tuple[int, ...]] = {}
            for pg in pgs if isinstance(pgs, list) else []:
                if not isinstance(pg, dict) or not isinstance(pg.get("pg_name"), str):
                    continue
                ranks, size = pg.get("ranks"), pg.get("group_size")
                if (
                    isinstance(ranks, list)
                    and ranks
                    and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks)
                ):
                    out[pg["pg_name"]] = tuple(ranks)
                elif isinstance(size, int) and not isinstance(size, bool) and 0 < size <= 1 << 20:
                    out[pg["pg_name"]] = tuple(range(size))  # an empty list: every rank
            return out
    return {}


def _rank_of(path: Path) -> int:
    m = _RANK_RE.search(path.name.split(".")[0])
    if m is None:
        raise ReplayPlanError(f"{path}: a host trace does not name its rank and the file name holds no number")
    return int(m.group(1))


def plan_from_chakra(paths: list[Path]) -> ReplayPlan:
    """A plan from one host execution trace per rank (JSON, or gzip of it)."""
    groups: dict[str, tuple[int, ...]] = {}
    per_rank: dict[int, list[PlanCall]] = {}
    dropped: dict[str, int] = {}
    for path in paths:
        nodes = _load(path)
        rank = _rank_of(path)
        if rank in per_rank:
            raise ReplayPlanError(f"{path}: a second trace of rank {rank}")
        for name, ranks in _groups(nodes, path).items():
            groups.setdefault(name, ranks)
        comms = [
            n
            for n in nodes
            if isinstance(n, dict) and n.get("name") == "record_param_comms" and isinstance(n.get("id"), int)
        ]
        comms.sort(key=lambda n: n["id"])
        calls = []
        for n in comms:
            a = _attrs(n)
            raw = str(a.get("collective_name", "")).lower()
            if raw in _SKIPPED:
                continue
            key = raw.strip("_").replace("_", "")
            for suffix in ("coalesced",):
                key = key.removesuffix(suffix)
            op = _OPS.get(key)
            dtype = KINETO_DTYPES.get(str(a.get("dtype", "")).lower())
            count, group = a.get("in_msg_nelems"), a.get("pg_name")
            if op is None or dtype is None or not isinstance(count, int) or not isinstance(group, str) or not group:
                reason = f"{raw or 'unnamed'} (op, dtype, in_msg_nelems or pg_name missing or unknown)"
                dropped[reason] = dropped.get(reason, 0) + 1
                continue
            members = groups.get(group)
            if members is None:
                size = a.get("pg_size")
                if group == "0" and isinstance(size, int) and 0 < size <= 1 << 20:
                    members = groups[group] = tuple(range(size))
                else:
                    dropped[f"on process group {group}, not in the trace's process_group:init"] = 1 + dropped.get(
                        f"on process group {group}, not in the trace's process_group:init", 0
                    )
                    continue
            peer = None
            if op in ("send", "recv"):
                values = n.get("inputs", {}).get("values") if isinstance(n.get("inputs"), dict) else None
                local = values[3] if isinstance(values, list) and len(values) > 3 else None
                if not isinstance(local, int) or not 0 <= local < len(members):
                    dropped[f"{op} without its peer"] = dropped.get(f"{op} without its peer", 0) + 1
                    continue
                peer = members[local]
            else:
                if op in ("reduce_scatter", "scatter", "all_to_all"):
                    count //= len(members)
            spec_reduces = op in OPS and OPS[op].reduces
            has_root = op in OPS and OPS[op].has_root
            calls.append(
                PlanCall(
                    op=op,
                    group=group,
                    count=max(0, count),
                    dtype=dtype,
                    start_s=0.0,
                    duration_s=0.0,
                    gap_s=0.0,
                    redop="sum" if spec_reduces else None,
                    root=members[0] if has_root else None,
                    peer=peer,
                )
            )
        per_rank[rank] = calls
    world = max([max(per_rank) + 1] + [max(r) + 1 for r in groups.values() if r])
    notes = [
        "a host execution trace holds no times: durations and gaps are 0 (replays back to back, nothing "
        "recorded to compare with)",
        "ranks taken from the file names; reductions replayed as sum, roots as the group's first rank",
    ]
    notes += [f"left out {n} call{'s' if n > 1 else ''}: {reason}" for reason, n in sorted(dropped.items())]
    used = {c.group for calls in per_rank.values() for c in calls}
    return ReplayPlan(
        source="chakra",
        world_size=world,
        groups=tuple(PlanGroup(name, ranks) for name, ranks in sorted(groups.items()) if name in used),
        ranks=tuple(RankCalls(r, tuple(c)) for r, c in sorted(per_rank.items())),
        notes=tuple(notes),
        files=tuple(str(p) for p in paths),
        timing="none (a host execution trace records order only)",
    )
