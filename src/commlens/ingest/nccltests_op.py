"""Which collective an nccl-tests table measured, from the table's own evidence.

nccl-tests before its ``# Collective test starting`` line (2025), and logs captured from
mpirun, Kubernetes or Slurm without the command line, do not name the op. The table still
says a lot about it (facts from NVIDIA/nccl-tests ``src/*.cu`` and ``src/common.cu``; the op
facts themselves come from :mod:`commlens.ops`):

- ``redop``: ``none`` for the ops that do not reduce; a reduction name for the reductions and
  for ``sendrecv``, which prints the ``-o`` op it was given (``sum`` by default) in every version
  that has the column; before the 2.13 resync (2022) each test printed its own header, and only
  the reductions' headers had a ``redop`` column;
- ``root``: ``-1`` for the ops without a root, the root rank for broadcast, reduce, gather, scatter;
- ``size`` against ``count`` x the type's size: ``x ranks`` for the per-rank ops (all_gather,
  reduce_scatter, alltoall, gather, scatter);
- printed busBW / algBW: each op's factor at the world size; all_gather and reduce_scatter
  printed algBW = busBW (ratio 1) before nccl-tests commit ec1b5e2 (2020-06-19), which only
  tables with the pre-2.13 ``error`` column can be;
- NCCL's own ``NCCL INFO AllReduce: opCount ...`` records (``NCCL_DEBUG_SUBSYS=COLL``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commlens.errors import CommlensError
from commlens.ops import OPS, OpSpec

__all__ = [
    "RowEvidence",
    "TableEvidence",
    "OpInference",
    "OpInferenceError",
    "infer_op",
    "ratio_fits",
    "NCCL_COLL_OPS",
    "OLD_ALGBW_OPS",
]

# NCCL's opName in its COLL records -> the catalog ops that make such calls.
NCCL_COLL_OPS: dict[str, frozenset[str]] = {
    "AllReduce": frozenset({"all_reduce"}),
    "AllGather": frozenset({"all_gather"}),
    "ReduceScatter": frozenset({"reduce_scatter"}),
    "Broadcast": frozenset({"broadcast"}),
    "Reduce": frozenset({"reduce"}),
    "AlltoAll": frozenset({"all_to_all"}),
    "Gather": frozenset({"gather"}),
    "Scatter": frozenset({"scatter"}),
    "Send": frozenset({"sendrecv", "all_to_all", "gather", "scatter"}),
    "Recv": frozenset({"sendrecv", "all_to_all", "gather", "scatter"}),
}

# Ops whose printed algBW nccl-tests defined as count x elem x (n-1) / time (= busBW) before ec1b5e2.
OLD_ALGBW_OPS = frozenset({"all_gather", "reduce_scatter"})

# Printed bandwidths have two decimals (%6.2f); below this algBW a row says too little about the ratio.
_MIN_ALGBW_GBPS = 1.0
_HALF_ULP_GBPS = 0.005


@dataclass(frozen=True)
class RowEvidence:
    """What one table row says, before its op is known (the first half the row prints)."""

    line: int
    size_bytes: int
    count: int
    elem_size: int
    redop: str | None  # None: the table has no redop column; "": the row prints it blank
    root: int | None  # None: no root column
    algbw_gbps: float
    busbw_gbps: float


@dataclass
class TableEvidence:
    world_size: int
    rows: list[RowEvidence]
    pre_2_13: bool  # the table has the ``error`` column (nccl-tests before its 2.13 resync, 2022)
    columns: tuple[str, ...] = ()  # the header's columns before the times: size, count, type[, redop][, root]
    nccl_colls: dict[str, int] = field(default_factory=dict)  # NCCL COLL record op name -> first line


@dataclass(frozen=True)
class OpInference:
    op: OpSpec
    how: str  # for ``op_from``


class OpInferenceError(CommlensError, ValueError):
    """No op, or several, fit the table; ``candidates`` are the ones that fit (maybe none)."""

    def __init__(self, line: int, message: str, candidates: tuple[str, ...]) -> None:
        super().__init__(message)
        self.line = line
        self.message = message
        self.candidates = candidates


def ratio_fits(rows: list[RowEvidence], ratio: float) -> bool | None:
    """Whether every row's printed busBW / algBW allows ``ratio``; None when no row is precise enough."""
    usable = [r for r in rows if r.algbw_gbps >= _MIN_ALGBW_GBPS]
    if not usable:
        return None
    for r in usable:
        lo = max(0.0, r.busbw_gbps - _HALF_ULP_GBPS) / (r.algbw_gbps + _HALF_ULP_GBPS)
        hi = (r.busbw_gbps + _HALF_ULP_GBPS) / (r.algbw_gbps - _HALF_ULP_GBPS)
        if not (lo * 0.995 <= ratio <= hi * 1.005):
            return False
    return True


def _ratios(spec: OpSpec, ev: TableEvidence) -> list[float]:
    ratios = [spec.busbw_factor(ev.world_size)]
    if spec.name in OLD_ALGBW_OPS and ev.pre_2_13:
        ratios.append(1.0)
    return ratios


def _misfit(spec: OpSpec, ev: TableEvidence) -> str | None:
    """Why the table cannot be ``spec``, or None if all its evidence agrees."""
    n = ev.world_size
    if ev.pre_2_13 and ev.rows and ev.rows[0].redop is None and spec.reduces:
        return "a pre-2.13 table without a redop column, which nccl-tests printed for every reduction"
    if ev.pre_2_13 and ev.columns:  # before 2.13 each test printed a header of its own
        if spec.has_root and "root" not in ev.columns:
            return "a pre-2.13 table without a root column, which nccl-tests printed for the ops with a root"
        if spec.name == "all_gather" and "redop" in ev.columns:
            return "a pre-2.13 table with a redop column, which all_gather_perf's header did not have"
        if spec.name == "all_to_all" and "redop" not in ev.columns:
            return "a pre-2.13 table without a redop column, which alltoall_perf's header had (printed blank)"
    for r in ev.rows:
        expected = r.count * r.elem_size * (n if spec.per_rank_split else 1)
        if r.size_bytes != expected:
            return f"size {r.size_bytes} B is not count x {r.elem_size} B{' x ranks' if spec.per_rank_split else ''}"
        if r.redop == "":
            if spec.reduces or spec.name == "sendrecv":
                return "redop printed blank, and it names a reduction"
        elif r.redop is not None:
            if r.redop == "none" and spec.reduces:
                return "redop none, and it reduces"
            if r.redop != "none" and not spec.reduces and spec.name != "sendrecv":
                return f"redop {r.redop}, and it does not reduce"
        if r.root is not None:
            if r.root >= 0 and not spec.has_root:
                return f"root {r.root}, and it has none"
            if r.root < 0 and spec.has_root:
                return "root -1, and it has a root"
    fits = [ratio_fits(ev.rows, x) for x in _ratios(spec, ev)]
    if fits and all(f is False for f in fits):
        return f"busBW/algBW is not {' or '.join(f'{x:.3g}' for x in _ratios(spec, ev))} at {n} ranks"
    for name, line in ev.nccl_colls.items():
        ops = NCCL_COLL_OPS.get(name)
        if ops is not None and spec.name not in ops:
            return f"NCCL logged {name} calls (line {line})"
    return None


def _evidence_text(ev: TableEvidence) -> str:
    first = ev.rows[0]
    # A 0-byte row fits any size rule: the rule is read off the first row that moves data.
    sized = next((r for r in ev.rows if r.count > 0), first)
    per_rank = sized.count * sized.elem_size * ev.world_size == sized.size_bytes and ev.world_size > 1
    if sized.count * sized.elem_size * (ev.world_size if per_rank else 1) == sized.size_bytes:
        parts = [f"size = count x {sized.elem_size} B{' x ranks' if per_rank else ''}"]
    else:
        parts = [f"size {sized.size_bytes} B for count {sized.count} x {sized.elem_size} B (line {sized.line})"]
    if first.redop == "":
        parts.append("redop printed blank")
    elif first.redop is not None:
        parts.append(f"redop {first.redop}")
    if first.root is not None:
        parts.append(f"root {first.root}")
    usable = [r for r in ev.rows if r.algbw_gbps >= _MIN_ALGBW_GBPS]
    if usable:
        best = max(usable, key=lambda r: r.algbw_gbps)
        parts.append(f"busBW/algBW {best.busbw_gbps / best.algbw_gbps:.3f} at {ev.world_size} ranks")
    else:
        parts.append(f"busBW/algBW undecided (no row reaches {_MIN_ALGBW_GBPS:g} GB/s algBW)")
    if ev.nccl_colls:
        parts.append("NCCL logged " + ", ".join(f"{k} calls (line {v})" for k, v in ev.nccl_colls.items()))
    return "; ".join(parts)


def infer_op(ev: TableEvidence) -> OpInference:
    """The one catalog op that fits every piece of the table's evidence.

    1. For each payload op of the catalog, check every row's size against count x the type's
       size (x ranks for the per-rank ops), the redop and root columns where the table has them.
    2. Check the printed busBW / algBW of the rows precise enough to say (algBW >= 1 GB/s, both
       printed with two decimals) against the op's factor at the world size (and 1 for
       all_gather / reduce_scatter in pre-2.13 tables, the definition before 2020-06-19).
    3. Drop the ops NCCL's own COLL records rule out.
    4. One op left: that is the op. None or several: :class:`OpInferenceError` naming the
       candidates and the evidence; the caller's ``--op`` is the way out.
    """
    line = ev.rows[0].line
    fits: list[str] = []
    misfits: list[str] = []
    for spec in OPS.values():
        if spec.name == "barrier":
            continue
        why = _misfit(spec, ev)
        if why is None:
            fits.append(spec.name)
        else:
            misfits.append(f"{spec.name}: {why}")
    evidence = _evidence_text(ev)
    if len(fits) == 1:
        return OpInference(OPS[fits[0]], f"inferred from the table at line {line} ({evidence}): only {fits[0]} fits")
    if not fits:
        raise OpInferenceError(
            line,
            (
                f"the log does not say which collective this table measured, and no collective fits its evidence "
                f"({evidence}; {'; '.join(misfits)}); pass the op if you know it (commlens ingest --op NAME)"
            ),
            (),
        )
    raise OpInferenceError(
        line,
        (
            f"the log does not say which collective this table measured, and its evidence ({evidence}) fits "
            f"{len(fits)}: {', '.join(fits)}; pass the op (commlens ingest "
            f"{' or '.join(f'--op {name}' for name in fits)})"
        ),
        tuple(fits),
    )
