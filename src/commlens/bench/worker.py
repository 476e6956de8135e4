"""The per-rank benchmark: runs the sweep, times every iteration, validates, reports.

The same worker runs under ``commlens bench`` (which launches it through
``torch.distributed``'s elastic launcher and passes ``--rows-file``) and under
any external launcher (``torchrun``, ``srun``, ``mpirun``), reading the
standard environment. Rank 0 streams each finished row as one JSON line; the
launcher, or rank 0 itself when run standalone, turns them into a run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch
import torch.distributed as dist

from commlens.bench.collectives import Buffers, Collective, all_gather_tensor, buffer_bytes, prepare
from commlens.bench.config import (
    BenchConfig,
    ConfigError,
    backend_problem,
    build_parser,
    command_line,
    config_from_args,
)
from commlens.bench.events import Event, Finished, Note, Progress, RowDone, Started
from commlens.bench.faults import Fault, fault_from_env
from commlens.bench.sysinfo import local_facts, system_info
from commlens.bench.validate import TORCH_DTYPES
from commlens.ops import OpSpec
from commlens.results.records import DTYPE_SIZES, Measurement, Run
from commlens.results.runconfig import BenchSettings

__all__ = [
    "main",
    "measure_interleaved",
    "measure_samples",
    "round_orders",
    "iteration_times",
    "RowFailure",
    "RowTimes",
    "Timestamps",
    "normalize_launcher_env",
]

log = logging.getLogger(__name__)

# Warm-up iterations of a row in every round after the first (see Sweep.run_placement), whether the round
# runs in a fresh process group or the default one: the row's code paths and data are warm from round 0, and
# the one launch absorbs what a new group sets up lazily (an NCCL communicator; gloo connects in new_group).
LATER_ROUND_WARMUP = 1
# From this message size a later round's row on CPU is timed without warming up again (but for the round's first
# row, which meets the round's group first): one launch moves more than the caches hold, so it leaves nothing
# warm that the previous row took away, and at these sizes the warm-ups were most of what rounds added to a
# sweep. Not on a GPU, whose L2 (50 MB and more) holds such a message: there every later round warms up.
LATER_ROUND_COLD_BYTES = 16 * 1024 * 1024

UNSUPPORTED_HINTS = (
    "not supported",
    "unsupported",
    "does not support",
    "not implemented",
    "cannot use",
    "can't be cast to the desired output type",
)  # gloo: avg on integer types


class RowFailure(RuntimeError):
    """An error on one rank, with the row it happened in."""


class UnsupportedCombination(RuntimeError):
    """The backend refused an op/dtype/reduction combination."""


class StartupFailure(RuntimeError):
    """The ranks did not all join the process group (one too slow for --timeout, or gone)."""


def normalize_launcher_env() -> None:
    """Map Slurm and Open MPI variables onto torch's RANK/WORLD_SIZE/LOCAL_RANK when absent."""
    pairs = (
        ("RANK", ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")),
        ("WORLD_SIZE", ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
        ("LOCAL_RANK", ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")),
    )
    for target, sources in pairs:
        if target not in os.environ:
            for src in sources:
                if src in os.environ:
                    os.environ[target] = os.environ[src]
                    break
    os.environ.setdefault("LOCAL_RANK", "0")


def _wait(work: Any) -> None:
    if work is None:
        return
    if isinstance(work, list):
        for w in work:
            w.wait()
    else:
        work.wait()


@dataclass(frozen=True)
class Timestamps:
    """One rank's timed iterations: when each started and ended, in seconds.

    On CPU both come from the monotonic clock (``time.perf_counter``), which
    every process on a host shares; on a GPU they are CUDA event times
    relative to the first start event, meaningful within one rank only.
    """

    starts: tuple[float, ...]
    ends: tuple[float, ...]

    @property
    def durations(self) -> list[float]:
        return [e - s for s, e in zip(self.starts, self.ends)]


def round_orders(count: int, iters: int, seed: int | None) -> list[list[int]]:
    """The order of the ``count`` implementations in each of ``iters`` rounds.

    Without a seed (or with one implementation) every round runs them as given.
    With one, each round is a fresh permutation drawn from ``seed``, the same on
    every rank (all ranks must launch the same collective next): no
    implementation always runs first, last, or right after the same neighbour,
    whose aftermath (a slow backend collective's threads finishing, skew between
    ranks) would otherwise always land on it.
    """
    if seed is None or count < 2:
        return [list(range(count)) for _ in range(iters)]
    rng = random.Random(seed)
    orders = []
    for _ in range(iters):
        order = list(range(count))
        rng.shuffle(order)
        orders.append(order)
    return orders


def measure_interleaved(
    colls: Sequence[Collective], iters: int, device: torch.device, blocking: bool, seed: int | None = None
) -> list[Timestamps]:
    """Time ``iters`` rounds that launch each collective once (a, b, c, then the next round ...).

    Interleaved, so drift in the machine's load over the loop hits every
    implementation alike; each round's order comes from :func:`round_orders`
    (``seed``: shuffled, the same on every rank). With one collective these are
    back-to-back launches. CUDA events on a GPU, the monotonic clock on CPU; one
    :class:`Timestamps` per collective, in the order given.
    """
    orders = round_orders(len(colls), iters, seed)
    if device.type == "cuda":
        starts = [[torch.cuda.Event(enable_timing=True) for _ in range(iters)] for _ in colls]
        ends = [[torch.cuda.Event(enable_timing=True) for _ in range(iters)] for _ in colls]
        for i in range(iters):
            for j in orders[i]:
                starts[j][i].record()
                work = colls[j].launch()
                ends[j][i].record()
                if blocking:
                    _wait(work)
                    torch.cuda.synchronize(device)
        torch.cuda.synchronize(device)
        first = starts[orders[0][0]][0]
        return [
            Timestamps(
                tuple(first.elapsed_time(s) / 1e3 for s in coll_starts),
                tuple(first.elapsed_time(e) / 1e3 for e in coll_ends),
            )
            for coll_starts, coll_ends in zip(starts, ends)
        ]
    clock = time.perf_counter
    t_start: list[list[float]] = [[] for _ in colls]
    t_end: list[list[float]] = [[] for _ in colls]
    launches = [(coll.launch, t_start[j], t_end[j]) for j, coll in enumerate(colls)]
    for i in range(iters):
        for j in orders[i]:
            launch, my_start, my_end = launches[j]
            my_start.append(clock())
            _wait(launch())
            my_end.append(clock())
    return [Timestamps(tuple(s), tuple(e)) for s, e in zip(t_start, t_end)]


def measure_samples(coll: Collective, iters: int, device: torch.device, blocking: bool) -> Timestamps:
    """Time ``iters`` back-to-back launches: CUDA events on a GPU, the monotonic clock on CPU."""
    return measure_interleaved([coll], iters, device, blocking)[0]


def iteration_times(starts: list[list[float]], ends: list[list[float]], shared_clock: bool) -> list[float]:
    """Each iteration's time across ranks, from every rank's timestamps ``[rank][iteration]``.

    1. With a clock shared by all ranks (one host, CPU): from the moment the
       last rank started the iteration to the moment the last rank finished it,
       ``max_r end[r][i] - max_r start[r][i]``. A rank that starts early and
       waits for its peers does not inflate the figure, and the times of
       back-to-back iterations add up to the wall time of the whole loop.
    2. Otherwise (ranks on several hosts, or GPU event clocks): the longest
       rank's own duration, ``max_r (end[r][i] - start[r][i])``.
    """
    if shared_clock:
        return [max(col_e) - max(col_s) for col_s, col_e in zip(zip(*starts), zip(*ends))]
    return [max(e - s for s, e in zip(col_s, col_e)) for col_s, col_e in zip(zip(*starts), zip(*ends))]


_TRIM: list[Any] = []  # [glibc's malloc_trim] or [None] where the C library has none, once looked up


def release_freed_memory() -> None:
    """Give the heap's freed pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    Called before each placement of a cell and between cells, outside every timed loop. gloo allocates a message-sized temporary in some calls
    (all_gather's flat output, gather's, reduce_scatter's); once glibc has freed one such block its dynamic
    mmap threshold rises and the next ones come from the heap, where freed blocks stayed resident: a rank
    held several messages of freed memory after a few rows of different sizes or dtypes, which a raw loop
    of as many rows holds too (``benchmarks/bench_footprint.py``).
    """
    if not _TRIM:
        import ctypes

        try:  # the process's own symbols: the C library it runs on (no ldconfig subprocess)
            _TRIM.append(getattr(ctypes.CDLL(None), "malloc_trim", None))
        except OSError:
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class RowTimes:
    """One placement's timing as rank 0 sees it after the gather."""

    samples_s: list[float]  # per iteration, across ranks (see iteration_times)
    rank_samples_s: list[list[float]]  # [rank][iteration]: each rank's own durations
    wrong_per_rank: list[int]


class Reporter:
    """Rank 0's outlet: JSON lines to the launcher's file, or the table to stdout."""

    def __init__(self, rows_file: str | None, standalone_print: Callable[[Event], None] | None):
        self._fp = open(rows_file, "a", buffering=1) if rows_file else None
        self._print = standalone_print
        self.events: list[Event] = []  # kept only without a launcher, which reads the rows file instead

    def emit(self, event: Event) -> None:
        """Hand on one event: its wire line to the launcher's file (``commlens.bench.events``), else kept."""
        if self._fp is not None:
            self._fp.write(json.dumps(event.as_wire()) + "\n")
            self._fp.flush()
            return
        self.events.append(event)
        if self._print is not None:
            self._print(event)

    def close(self) -> None:
        if self._fp is not None:
            self._fp.close()


@contextmanager
def _row_failure(context: str) -> Iterator[None]:
    """Turn an error inside one row into a RowFailure saying where (a refusal passes through as it is)."""
    try:
        yield
    except UnsupportedCombination:
        raise
    except Exception as e:
        raise RowFailure(f"{context}: {type(e).__name__}: {e}") from e


def _algo_refusal(err: ValueError) -> str | None:
    from commlens.bench.algorithms import refusal

    return refusal(err)


def gloo_average_refusal(backend: str, algo: str, dtype: str, redop: str | None, world: int) -> str | None:
    """Why gloo cannot average a ``dtype`` tensor, or None where it can (or the row is not gloo's average).

    gloo's AVG sums, then divides the sum in place by the world size inside its work; torch refuses that division
    for a tensor that is not floating point. Launched, the refusal is raised from gloo's worker thread, and CI saw a
    rank of three meet it in its next row's collective instead of the probe (twice, ``test_bench_sweep.py`` world 3),
    so the ranks disagreed on the row. The same division on a one-element tensor of the row's dtype gives torch's own
    message on every rank at once, before anything is sent."""
    if backend != "gloo" or algo != "builtin" or redop != "avg":
        return None
    probe = torch.ones(1, dtype=TORCH_DTYPES[dtype])
    if probe.is_floating_point() or probe.is_complex():
        return None
    try:
        probe.div_(world)
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


class SweepRow(NamedTuple):
    """One row of the sweep, in the order the table prints them."""

    spec: OpSpec
    algo: str
    dtype: str
    redop: str | None  # None: the op does not reduce
    root: int | None  # None: the op has no root
    size: int  # the requested size in bytes (the op's size plan may round it down)

    def cell(self) -> SweepRow:
        """What the rows run together with ``interleave`` share: the row but for its implementation."""
        return self._replace(algo="")

    def combination(self) -> SweepRow:
        """What a backend's refusal holds for: the row whatever its size."""
        return self._replace(size=0)


def _row_context(
    spec: OpSpec,
    size: int,
    dtype: str,
    redop: str | None,
    root: int | None,
    in_place: bool | None,
    algo: str = "builtin",
) -> str:
    parts = [spec.name if algo == "builtin" else f"{spec.name} ({algo})", f"size {size} B", dtype]
    if redop is not None:  # spec.reduces
        parts.append(redop)
    if spec.has_root:
        parts.append(f"root {root}")
    if in_place is not None:
        parts.append("in-place" if in_place else "out-of-place")
    return " ".join(parts)


class Sweep:
    """One rank's sweep over ops x dtypes x reductions x roots x sizes x placements."""

    def __init__(self, cfg: BenchConfig, rank: int, world: int, local_rank: int, ctrl: Any, workdir: Path | None):
        self.cfg = cfg
        self.rank = rank
        self.world = world
        self.ctrl = ctrl
        self.workdir = workdir
        self.fault: Fault | None = fault_from_env()
        self.shared_clock = False  # set once every rank's host is known
        self.ranks_per_host: int | None = None  # ranks on this rank's host, when every host has as many
        self._auto_seen: dict[str, tuple[str, str]] = {}  # op -> what auto ran for the last row
        self._last_state: str | None = None  # what the state file says
        if cfg.device == "cuda":
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.buffers = Buffers(self.device)  # every row's tensors are views of these

    def reserve_buffers(self, rows: Sequence[SweepRow]) -> None:
        """Allocate the send and receive buffers once, for the largest of ``rows`` (see :class:`Buffers`)."""
        send_bytes = recv_bytes = 0
        for row in rows:
            elem = DTYPE_SIZES[row.dtype]
            send, recv = buffer_bytes(row.spec, row.spec.plan_size(row.size, elem, self.world), elem)
            send_bytes, recv_bytes = max(send_bytes, send), max(recv_bytes, recv)
        self.buffers.reserve(send_bytes, recv_bytes)

    def rows(self) -> list[SweepRow]:
        """Every row, in the order the table prints them."""
        out = []
        roots = tuple(range(self.world)) if self.cfg.roots == "all" else self.cfg.roots
        for spec in self.cfg.op_specs:
            if spec.name == "barrier":  # no payload: one row, whatever the dtypes and sizes
                out.append(SweepRow(spec, "builtin", self.cfg.dtypes[0], None, None, self.cfg.min_bytes))
                continue
            for algo in self._algos(spec.name):
                for dtype in self.cfg.dtypes:
                    for redop in self.cfg.redops if spec.reduces else (None,):
                        for root in roots if spec.has_root else (None,):
                            for size in self.cfg.sizes():
                                out.append(SweepRow(spec, algo, dtype, redop, root, size))
        return out

    def _algos(self, op: str) -> list[str]:
        if self.cfg.algos == ("builtin",):
            return ["builtin"]
        from commlens.bench.algorithms import expand

        return expand(self.cfg.algos, op)

    def _state(self, context: str) -> None:
        if self.workdir is not None and context != self._last_state:
            self._last_state = context
            (self.workdir / f"state-rank{self.rank}.txt").write_text(context)

    def _context(
        self,
        spec: OpSpec,
        size_bytes: int,
        dtype: str,
        redop: str | None,
        root: int | None,
        in_place: bool,
        algos: Sequence[str],
    ) -> str:
        return f"rank {self.rank}: " + _row_context(spec, size_bytes, dtype, redop, root, in_place, ", ".join(algos))

    def run_placement(
        self,
        spec: OpSpec,
        dtype: str,
        redop: str | None,
        root: int | None,
        size: int,
        in_place: bool,
        algos: Sequence[str],
        iters: int,
        group: Any = None,
        round_index: int = 0,
        first_in_round: bool = False,
    ) -> tuple[dict[str, tuple[Timestamps, int] | None], dict[str, str]]:
        """Time and check one placement of each of ``algos`` on this rank, their timed loops interleaved.

        Returns (algo -> (timestamps, wrong elements), or None where torch does not offer the placement) and
        (algo -> reason) for the implementations that refused the combination; the others carry on.

        The first round (``round_index`` 0) warms up ``cfg.warmup`` iterations and checks the results; a later
        round warms up ``min(cfg.warmup, LATER_ROUND_WARMUP)`` in its group, fresh or shared (the code paths
        and the data are not new; one launch sets up what a fresh group creates lazily and brings the row's
        buffers back into the caches other rows used), none from ``LATER_ROUND_COLD_BYTES`` on CPU unless it is
        the round's first row (``first_in_round``), and does not check again: results are checked once per row,
        as nccl-tests does with ``-c 1``.
        """
        cfg = self.cfg
        plan = spec.plan_size(size, DTYPE_SIZES[dtype], self.world)
        if round_index == 0:
            warmup = cfg.warmup
        elif plan.size_bytes >= LATER_ROUND_COLD_BYTES and not first_in_round and self.device.type == "cpu":
            warmup = 0
        else:
            warmup = min(cfg.warmup, LATER_ROUND_WARMUP)
        ready: list[tuple[str, Collective, Fault | None, int]] = []  # (algo, collective, fault, wrong at warm-up)
        refused: dict[str, str] = {}
        for algo in algos:
            context = self._context(spec, plan.size_bytes, dtype, redop, root, in_place, [algo])
            self._state(context)
            with _row_failure(context):
                # Synchronous calls on every device: on CUDA that orders the collective on the current
                # stream (host not blocked), so the CUDA events around each launch bracket it.
                coll = prepare(
                    spec,
                    plan,
                    dtype,
                    redop,
                    root,
                    in_place,
                    self.rank,
                    self.world,
                    self.device,
                    group=group,
                    algo=algo,
                    chunk_bytes=cfg.chunk_bytes,
                    ranks_per_host=self.ranks_per_host,
                    buffers=self.buffers,
                )
                if coll is None:  # a placement torch does not offer, whatever the implementation
                    return dict.fromkeys(algos), {}
                known = gloo_average_refusal(self.cfg.backend, algo, dtype, redop, self.world)
                if known is not None:  # refused before launching: every rank alike
                    refused[algo] = known
                    continue
                fault = (
                    self.fault if self.fault and self.fault.matches(self.rank, spec.name, size, round_index) else None
                )
                try:
                    first_wrong = self._warm_up(coll, fault, context, algo, warmup, fill=round_index == 0)
                except UnsupportedCombination as e:
                    refused[algo] = str(e)
                    continue
            ready.append((algo, coll, fault, first_wrong))
        if not ready:
            return {}, refused
        context = self._context(spec, plan.size_bytes, dtype, redop, root, in_place, [a for a, _, _, _ in ready])
        self._state(context)
        with _row_failure(context):
            _sync(self.device)
            dist.barrier(group=self.ctrl)
            stamps = measure_interleaved(
                [coll for _, coll, _, _ in ready], iters, self.device, cfg.blocking, seed=cfg.seed + plan.size_bytes
            )
        results: dict[str, tuple[Timestamps, int] | None] = {}
        for (algo, coll, fault, first_wrong), algo_stamps in zip(ready, stamps):
            context = self._context(spec, plan.size_bytes, dtype, redop, root, in_place, [algo])
            self._state(context)
            with _row_failure(context):
                # the first check iteration was the first warm-up launch; the others run here
                more = self._check(coll, fault, self.cfg.check_iters - 1) if round_index == 0 else 0
                results[algo] = (algo_stamps, first_wrong + more)
        return results, refused

    def _warm_up(
        self, coll: Collective, fault: Fault | None, context: str, algo: str, warmup: int, fill: bool = True
    ) -> int:
        """The warm-up launches; the first doubles as the support probe (UnsupportedCombination if refused).
        Returns the wrong elements of the first launch when it is checked, else 0.

        ``fill`` writes the inputs' pattern first (the first round, which checks the results); a later round
        times the buffers as the rows before it left them, as a raw loop does: rewriting a 64 MiB pattern
        on every round cost more than the round's timed iterations. A later round (no ``fill``) with
        ``warmup`` 0 launches nothing: the first round probed the combination already.

        With ``fill`` and ``cfg.check_iters`` >= 1 the first launch, from freshly written inputs, is also the
        first check iteration (:meth:`_check` runs the others): a separate check launch of a 64 MiB row cost
        as much as a timed iteration. The launches after it run on what it left, as they did before."""
        if fill:
            coll.reset()
            _sync(self.device)
        if fault is not None and fault.kind in ("raise", "hang", "pause"):
            fault.trigger(context)
        if warmup == 0 and not fill:
            return 0
        try:
            _wait(coll.launch())
        except RuntimeError as e:
            if any(h in str(e).lower() for h in UNSUPPORTED_HINTS):
                raise UnsupportedCombination(str(e).splitlines()[0]) from None
            raise
        except ValueError as e:  # a commlens algorithm refusing the combination (avg on integers)
            reason = None if algo == "builtin" else _algo_refusal(e)
            if reason is None:
                raise
            raise UnsupportedCombination(reason) from None
        nwrong = self._verify(coll, fault) if fill and self.cfg.check_iters >= 1 else 0
        for _ in range(max(0, warmup - 1)):
            _wait(coll.launch())
        return nwrong

    def _verify(self, coll: Collective, fault: Fault | None) -> int:
        """Wrong elements of the launch just made (from freshly written inputs)."""
        _sync(self.device)
        if fault is not None and fault.kind == "corrupt" and coll.output is not None and coll.output.numel():
            coll.output.view(-1)[0] += 1
        return coll.verify()

    def _check(self, coll: Collective, fault: Fault | None, iters: int) -> int:
        """Wrong elements over ``iters`` check iterations, each from freshly written inputs."""
        nwrong = 0
        for _ in range(max(0, iters)):
            coll.reset()
            _sync(self.device)
            _wait(coll.launch())
            nwrong += self._verify(coll, fault)
        return nwrong

    def gather(self, stamps: Timestamps | None, nwrong: int, iters: int) -> RowTimes | None:
        """Every rank's timestamps and wrong counts, combined on rank 0 (all ranks take part)."""
        n = iters
        starts = stamps.starts if stamps else (0.0,) * n
        ends = stamps.ends if stamps else (0.0,) * n
        mine = torch.tensor([*starts, *ends, float(nwrong)], dtype=torch.float64)
        everyone = torch.empty(self.world * (2 * n + 1), dtype=torch.float64)
        all_gather_tensor(everyone, mine, group=self.ctrl)
        if self.rank != 0:
            return None
        table = everyone.view(self.world, 2 * n + 1).tolist()
        rank_starts = [row[:n] for row in table]
        rank_ends = [row[n : 2 * n] for row in table]
        return RowTimes(
            samples_s=iteration_times(rank_starts, rank_ends, self.shared_clock),
            rank_samples_s=[[e - s for s, e in zip(rs, re)] for rs, re in zip(rank_starts, rank_ends)],
            wrong_per_rank=[int(row[2 * n]) for row in table],
        )

    def gather_round(self, deferred: list[_Deferred], iters: int) -> None:
        """One gather for a round's rows: every rank's timestamps of each listed measurement; on rank 0 each
        measurement becomes what :meth:`gather` would have made of it (a later round checks nothing, so
        there are no wrong counts to gather). Every rank lists the same measurements in the same order."""
        if not deferred:
            return
        n = iters
        mine = torch.tensor([t for _, _, st, _ in deferred for t in (*st.starts, *st.ends)], dtype=torch.float64)
        everyone = torch.empty(self.world * mine.numel(), dtype=torch.float64)
        all_gather_tensor(everyone, mine, group=self.ctrl)
        if self.rank != 0:
            return
        table = everyone.view(self.world, len(deferred), 2 * n).tolist()
        for k, (measurements, position, _, shape) in enumerate(deferred):
            rank_starts = [table[r][k][:n] for r in range(self.world)]
            rank_ends = [table[r][k][n:] for r in range(self.world)]
            measurements[position] = replace(
                shape,
                samples_s=tuple(iteration_times(rank_starts, rank_ends, self.shared_clock)),
                rank_samples_s=tuple(tuple(e - s for s, e in zip(rs, re)) for rs, re in zip(rank_starts, rank_ends)),
            )

    def cells(self, rows: list[SweepRow]) -> list[list[int]]:
        """The rows run together, as indices into ``rows``: each row alone or, with ``interleave``, every
        implementation of one (op, dtype, redop, root, size), their timed loops interleaved."""
        if not self.cfg.interleave:
            return [[i] for i in range(len(rows))]
        together: dict[SweepRow, list[int]] = {}
        for i, row in enumerate(rows):
            together.setdefault(row.cell(), []).append(i)
        return list(together.values())

    def run(self, reporter: Reporter | None) -> list[str]:
        """Run every row; returns the wrong-result messages (rank 0 only).

        With one round, rows run together are held until the last rows of their op are done, then emitted in
        the table's order (implementation outer, size inner), so the table and the run read as without
        ``interleave``. With several rounds (``cfg.rounds``), see :meth:`run_rounds`.
        """
        if self.cfg.rounds > 1:
            return self.run_rounds(reporter)
        rows = self.rows()
        self.reserve_buffers(rows)
        cells = self.cells(rows)
        refused: set[SweepRow] = set()  # combinations the backend refused (SweepRow.combination)
        wrong: list[str] = []
        held: list[tuple[int, RowDone | Note, list[str]]] = []  # (row index, row or note event, wrong messages)
        t_start = time.monotonic()

        def release() -> None:
            for _, event, messages in sorted(held, key=lambda h: h[0]):
                if reporter:
                    reporter.emit(event)
                wrong.extend(messages)
            held.clear()

        index = 0
        try:
            for n, cell in enumerate(cells):
                for outcome in self._run_cell(rows, cell, index, len(rows), refused, reporter, t_start, self.cfg.iters):
                    held.append((outcome.index, outcome.event(), outcome.wrong))
                index += len(cell)
                op = rows[cell[0]].spec.name
                if len(cell) == 1 or n + 1 == len(cells) or rows[cells[n + 1][0]].spec.name != op:
                    release()
        finally:
            release()
        return wrong

    def run_rounds(self, reporter: Reporter | None) -> list[str]:
        """Every row once per round, ``cfg.rounds`` rounds; each row's samples are the rounds' concatenation.

        1. Round ``r`` times ``cfg.round_iters()[r]`` iterations of every row (after the row's own warm-up):
           the first round in table order, each later one in a permutation of the cells drawn from
           ``cfg.seed`` and ``r`` (the same on every rank), so no row always runs first or right after the
           same neighbour, and a change of the machine's state between rounds hits every row alike.
        2. By default (``round_groups == "fresh"``) each round runs in a new process group (new connections
           or communicators), as pyperf runs each round in a fresh worker: what one set of connections makes
           of the machine is measured across rounds instead of being fixed for the run, which the gate's
           spread between rounds needs (``docs/bench.md``, *Rounds*). With ``"shared"`` every round runs in
           the default process group, set up once, as nccl-tests times one communicator.
        3. Rows are emitted once the last round is done (or the run stops: then with the rounds they have),
           in the table's order; a combination the backend refused in one round is not tried again.
        """
        cfg = self.cfg
        rows = self.rows()
        self.reserve_buffers(rows)
        cells = self.cells(rows)
        refused: set[SweepRow] = set()
        done: dict[int, list[_Outcome]] = {}  # row index -> its outcome in each round so far
        t_start = time.monotonic()
        total = len(rows) * cfg.rounds
        try:
            for r, iters in enumerate(cfg.round_iters()):
                order = list(range(len(cells)))
                if r > 0:  # the first round in table order: a refusal is met, and noted, at the first size
                    random.Random(f"{cfg.seed}/round/{r}").shuffle(order)
                group = self._round_group(r)
                deferred: list[_Deferred] | None = [] if r > 0 else None
                for n, c in enumerate(order):
                    first = sum(len(cells[k]) for k in order[:n])
                    for outcome in self._run_cell(
                        rows,
                        cells[c],
                        r * len(rows) + first,
                        total,
                        refused,
                        reporter,
                        t_start,
                        iters,
                        group=group,
                        round_index=r,
                        first_in_round=n == 0,
                        deferred=deferred,
                    ):
                        done.setdefault(outcome.index, []).append(outcome)
                if deferred is not None:
                    self.gather_round(deferred, iters)
                if group is not None:  # a round that failed leaves its group to the process' teardown
                    dist.destroy_process_group(group)
        finally:
            wrong: list[str] = []
            for index in sorted(done):
                merged = _merge_rounds(done[index])
                if reporter:
                    reporter.emit(merged.event())
                wrong.extend(merged.wrong)
        return wrong

    def _round_group(self, r: int) -> Any:
        """The process group round ``r`` times its collectives in: None (the default group) unless fresh."""
        if self.cfg.round_groups != "fresh":
            return None
        self._state(f"rank {self.rank}: round {r + 1}: creating its process group")
        return dist.new_group(backend=self.cfg.backend, timeout=dt.timedelta(seconds=self.cfg.timeout_s))

    def _run_cell(
        self,
        rows: list[SweepRow],
        cell: list[int],
        index: int,
        total: int,
        refused: set[SweepRow],
        reporter: Reporter | None,
        t_start: float,
        iters: int,
        group: Any = None,
        round_index: int | None = None,
        first_in_round: bool = False,
        deferred: list[_Deferred] | None = None,
    ) -> list[_Outcome]:
        """Run the rows of one cell for ``iters`` timed iterations; each row's outcome (row or skip note).

        With ``deferred`` (a later round) the ranks' timestamps are not gathered here: each measurement is
        listed there for :meth:`gather_round` and its place holds None until then (a round stopped before
        its gather leaves its rows as the earlier rounds made them)."""
        cfg = self.cfg
        spec, _, dtype, redop, root, size = rows[cell[0]]
        todo = {rows[i].algo: i for i in cell if rows[i].combination() not in refused}
        if not todo:
            return []
        if root is not None and root >= self.world:
            raise ConfigError(f"--root {root} is not a rank (world size {self.world})")
        plan = spec.plan_size(size, DTYPE_SIZES[dtype], self.world)
        if reporter:
            reporter.emit(self._progress(rows[cell[0]], plan, list(todo), index, total, t_start, round_index))
        notes = {algo: self._notes(spec, algo, plan, dtype, size, reporter) if not round_index else [] for algo in todo}
        measurements: dict[str, list[Measurement | None]] = {algo: [] for algo in todo}
        heads = {  # each row's record, its measurements to come
            algo: RowDone(spec.name, algo, dtype, redop, root, plan.size_bytes, plan.count, (), tuple(notes[algo]))
            for algo in todo
        }
        wrong: dict[str, list[str]] = {algo: [] for algo in todo}
        skipped: dict[str, str] = {}
        for in_place in cfg.placements():
            running = [algo for algo in todo if algo not in skipped]
            if not running:
                break
            release_freed_memory()  # what the cell's previous placement freed (gloo's temporaries), as between cells
            results, refusals = self.run_placement(
                spec, dtype, redop, root, size, in_place, running, iters, group, round_index or 0, first_in_round
            )
            for algo, reason in refusals.items():
                where = cfg.backend if algo == "builtin" else f"commlens {algo}"
                skipped[algo] = f"{_row_context(spec, plan.size_bytes, dtype, redop, root, None)} on {where}: {reason}"
            for algo, result in results.items():  # the same order on every rank: gather is collective
                if result is None:  # a placement torch does not offer: None on every rank, nothing to gather
                    measurements[algo].append(None)
                    continue
                head = heads[algo]
                if deferred is not None:  # a later round: gathered with the round's other rows (gather_round)
                    nwrong = None if cfg.check_iters == 0 else 0  # later rounds do not check
                    # rank 0's own durations only shape the row until the gather fills it in; a round
                    # interrupted before its gather adds nothing to the row, whose earlier rounds stay whole
                    own = _measurement(head, in_place, self.world, tuple(result[0].durations), nwrong)
                    deferred.append((measurements[algo], len(measurements[algo]), result[0], own))
                    measurements[algo].append(None)
                    continue
                gathered = self.gather(result[0], result[1], iters)
                if gathered is None:
                    measurements[algo].append(None)
                    continue
                if cfg.check_iters == 0:
                    nwrong = None
                else:
                    nwrong = sum(gathered.wrong_per_rank)
                    for r, w in enumerate(gathered.wrong_per_rank):
                        if w:
                            row = _row_context(spec, plan.size_bytes, dtype, redop, root, in_place, algo)
                            wrong[algo].append(f"{row}: {w} wrong elements on rank {r}")
                rank_samples_s = tuple(tuple(r) for r in gathered.rank_samples_s)
                measurements[algo].append(
                    _measurement(head, in_place, self.world, tuple(gathered.samples_s), nwrong, rank_samples_s)
                )
        outcomes: list[_Outcome] = []
        for algo, row_index in todo.items():
            if algo in skipped:
                if cfg.on_unsupported == "fail":
                    raise UnsupportedCombination(skipped[algo])
                # the backend refuses this op/dtype/redop whatever the size: skip its remaining sizes
                refused.add(rows[row_index].combination())
                outcomes.append(_Outcome(row_index, None, [], [], skip_note=f"skipped {skipped[algo]}"))
                continue
            outcomes.append(_Outcome(row_index, heads[algo], measurements[algo], wrong[algo]))
        release_freed_memory()
        return outcomes

    def _progress(
        self,
        row: SweepRow,
        plan: Any,
        algos: list[str],
        index: int,
        total: int,
        t_start: float,
        round_index: int | None,
    ) -> Progress:
        """The progress event of one cell (its row's op, dtype, reduction, root and size; the algorithms run)."""
        spec, _, dtype, redop, root, _ = row
        return Progress(
            index=index,
            total=total,
            op=spec.name,
            algo=",".join(algos),
            dtype=dtype,
            redop=redop,
            root=root,
            size_bytes=plan.size_bytes,
            elapsed_s=time.monotonic() - t_start,
            round=None if round_index is None else round_index + 1,
            rounds=None if round_index is None else self.cfg.rounds,
        )

    def _notes(self, spec: OpSpec, algo: str, plan: Any, dtype: str, size: int, reporter: Reporter | None) -> list[str]:
        """The notes printed above one row: a size rounded down, what auto runs when its choice changes."""
        notes = []
        if plan.rounded and spec.name != "barrier":
            notes.append(
                f"{spec.name} {dtype}: requested {size} B, ran {plan.size_bytes} B "
                f"({plan.count} elements per rank x {self.world} ranks, rounded down as nccl-tests)"
            )
        if algo == "auto" and reporter:
            from commlens.bench.algorithms import auto_note

            choice, note = auto_note(spec.name, plan.size_bytes, self.world, ranks_per_host=self.ranks_per_host)
            if self._auto_seen.get(spec.name) != choice:  # say it when the choice changes
                self._auto_seen[spec.name] = choice
                notes.append(note)
        return notes


# A later round's measurement waiting for its round's gather: (its placement list, its position there, this
# rank's stamps, the row with this rank's own durations, which the gather's samples replace)
_Deferred = tuple[list[Measurement | None], int, Timestamps, Measurement]


@dataclass
class _Outcome:
    """One row of one cell in one round: its measurements per placement, or the note that it was skipped."""

    index: int  # the row's position in the table
    head: RowDone | None  # the row's op, algo, dtype, redop, root, size, count and notes; None when skipped
    measurements: list[Measurement | None]  # per placement, None where torch offers none (filled in later)
    wrong: list[str]
    skip_note: str | None = None

    def event(self) -> RowDone | Note:
        if self.skip_note is not None or self.head is None:
            return Note(self.skip_note or "")
        return replace(self.head, measurements=tuple(self.measurements))


def _measurement(
    head: RowDone,
    in_place: bool,
    world: int,
    samples_s: tuple[float, ...],
    nwrong: int | None,
    rank_samples_s: tuple[tuple[float, ...], ...] | None = None,
) -> Measurement:
    """One placement's measurement of the row ``head``."""
    return Measurement(
        op=head.op,
        algo=head.algo,
        dtype=head.dtype,
        redop=head.redop,
        root=head.root,
        size_bytes=head.size_bytes,
        count=head.count,
        in_place=in_place,
        world_size=world,
        samples_s=samples_s,
        nwrong=nwrong,
        rank_samples_s=rank_samples_s,
    )


def _merge_rounds(outcomes: list[_Outcome]) -> _Outcome:
    """One row's outcomes of every round as one: samples round after round, ``rounds`` their counts.

    A row skipped in any round is skipped (a refusal does not depend on the round); wrong-result messages
    are kept from every round.
    """
    skipped = next((o for o in outcomes if o.skip_note is not None), None)
    if skipped is not None:
        return skipped
    first = outcomes[0]
    merged: list[Measurement | None] = []
    for p, m0 in enumerate(first.measurements):
        parts = [m for o in outcomes if p < len(o.measurements) and (m := o.measurements[p]) is not None]
        if m0 is None or not parts:
            merged.append(None)
            continue
        ranks = [m.rank_samples_s for m in parts]
        nwrongs = [m.nwrong for m in parts if m.nwrong is not None]
        per_rank: tuple[tuple[float, ...], ...] | None = None
        if all(r is not None for r in ranks):
            complete = [r for r in ranks if r is not None]
            per_rank = tuple(tuple(s for r in complete for s in r[k]) for k in range(len(complete[0])))
        merged.append(
            replace(
                m0,
                samples_s=tuple(s for m in parts for s in m.samples_s),
                rank_samples_s=per_rank,
                nwrong=sum(nwrongs) if nwrongs else None,
                rounds=tuple(len(m.samples_s) for m in parts),
            )
        )
    return _Outcome(first.index, first.head, merged, [w for o in outcomes for w in o.wrong])


def _init(cfg: BenchConfig) -> tuple[int, int, int, Any]:
    normalize_launcher_env()
    timeout = dt.timedelta(seconds=cfg.timeout_s)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available on this host")
    if not dist.is_available():
        raise ConfigError("this torch build has no torch.distributed")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    kwargs: dict[str, Any] = {"backend": cfg.backend, "timeout": timeout}
    if cfg.device == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        kwargs["device_id"] = torch.device("cuda", torch.cuda.current_device())
    try:
        dist.init_process_group(**kwargs)
    except (ValueError, RuntimeError) as e:
        msg = str(e).splitlines()[0]
        if "backend" in msg.lower() or "invalid" in msg.lower() or "not" in msg.lower():
            raise ConfigError(f"backend {cfg.backend!r} cannot start: {msg}") from None
        raise
    rank, world = dist.get_rank(), dist.get_world_size()
    ctrl = None if cfg.backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
    return rank, world, local_rank, ctrl


def ranks_per_host(rank_hosts: list[str], rank: int) -> int | None:
    """Ranks on ``rank``'s host when every host holds as many (what two-level algorithms need), else None."""
    counts = {h: rank_hosts.count(h) for h in rank_hosts}
    return counts[rank_hosts[rank]] if len(set(counts.values())) == 1 else None


class StandaloneOutputs(Protocol):
    """What rank 0 does with its run when no commlens launcher collects it (``torchrun -m commlens.bench``):
    the outputs the options ask for, checked before the sweep and written after it (by the CLI's face)."""

    def check(self, ns: argparse.Namespace) -> None:
        """Raise ConfigError for an output the run could not be saved to."""

    def finish(self, run: Run, wrong: list[str], ns: argparse.Namespace) -> int:
        """Save the run as asked; the process's exit code."""


def _settings(ns: argparse.Namespace) -> BenchConfig:
    """The run's settings: the launcher's config file, else the options."""
    if ns.config_file is None:
        return config_from_args(ns)
    cfg = BenchConfig.from_dict(json.loads(Path(ns.config_file).read_text()))
    problem = backend_problem(cfg.backend, cfg.device)
    if problem is not None:
        raise ConfigError(problem)
    return cfg


def run_worker(argv: list[str], outputs: StandaloneOutputs | None = None) -> int:
    """Entry point of one rank; returns the process exit code.

    Under ``commlens.bench.run`` (``--rows-file``) rank 0 streams its events to the launcher; under any other
    launcher rank 0 prints the table and hands the run to ``outputs``.
    """
    parser = build_parser("python -m commlens.bench")
    ns = parser.parse_args(argv)
    if ns.algo.strip().lower() == "list":
        from commlens.bench.algorithms import algo_listing

        print("\n".join(algo_listing()))
        return 0
    try:
        cfg = _settings(ns)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows_file = ns.rows_file
    workdir = Path(rows_file).parent if rows_file else None
    normalize_launcher_env()
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0 and not rows_file and outputs is not None:  # refuse bad outputs before the sweep
        try:
            outputs.check(ns)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    try:
        fault = fault_from_env()
        if fault is not None and fault.op == "init" and fault.rank == rank:
            fault.trigger("start-up")
        try:
            rank, world, local_rank, ctrl = _init(cfg)
            facts: list[Any] = [None] * world  # each rank's local_facts(), once gathered
            dist.all_gather_object(facts, local_facts(cfg.device, local_rank), group=ctrl)
        except dist.DistError as e:  # a rank did not join within --timeout, or went away while joining
            raise StartupFailure(f"rank {rank}: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from e
        sweep = Sweep(cfg, rank, world, local_rank, ctrl, workdir)
        sweep.shared_clock = cfg.device == "cpu" and len({f["machine"] for f in facts}) == 1
        # what auto's table lookup and two-level algorithms take as one host
        sweep.ranks_per_host = ranks_per_host([f["host"] for f in facts], rank)
        reporter = None
        if rank == 0:
            from commlens.bench.finalize import StandalonePrinter

            printer = None if rows_file else StandalonePrinter(quiet=ns.quiet)
            reporter = Reporter(rows_file, printer.handle if printer else None)
            system = system_info(world, cfg.backend, cfg.device, facts)
            reporter.emit(
                Started(
                    run_id=uuid.uuid4().hex,
                    started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    command_line=command_line(["python", "-m", "commlens.bench", *argv]),
                    config=BenchSettings(
                        {**cfg.as_dict(), "timing": "shared_clock" if sweep.shared_clock else "rank_duration_max"}
                    ),
                    system=system,
                )
            )
        status = "complete"
        wrong: list[str] = []
        try:
            wrong = sweep.run(reporter)
        except KeyboardInterrupt:
            status = "incomplete"
        if reporter:
            reporter.emit(
                Finished(
                    status=status,
                    wrong=tuple(wrong),
                    finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                )
            )
            reporter.close()
            if not rows_file and outputs is not None:
                from commlens.bench.finalize import run_from_events

                return outputs.finish(run_from_events(reporter.events), wrong, ns)
        if status == "incomplete":
            return 130
        return 0
    except (RowFailure, UnsupportedCombination, ConfigError, StartupFailure) as e:
        _report_error(workdir, rank, e)
        if workdir is None:  # under `commlens bench` the launcher reports, naming the rank at fault
            print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, (ConfigError, UnsupportedCombination)) else 1
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a broken group cannot be torn down cleanly
                pass


def _report_error(workdir: Path | None, rank: int, err: Exception) -> None:
    if workdir is None:
        return
    kinds = ((ConfigError, "config"), (UnsupportedCombination, "unsupported"), (StartupFailure, "startup"))
    kind = next((k for cls, k in kinds if isinstance(err, cls)), "failure")
    (workdir / f"error-rank{rank}.json").write_text(
        json.dumps({"rank": rank, "kind": kind, "message": str(err), "time": time.time()})
    )


def main() -> None:
    sys.exit(run_worker(sys.argv[1:]))  # no outputs: ``python -m commlens.bench`` (bench/__main__.py) gives them
