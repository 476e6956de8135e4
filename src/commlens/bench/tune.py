"""``commlens tune``: time every algorithm (and the built-in collective) per size, keep the fastest per bucket.

Steps (:func:`tune`):

1. One run of ``commlens.bench.run`` times ``--algo builtin,all`` (or the
   algorithms asked for) over the ops and sizes, with its usual warm-up,
   timing and check of every row: the candidates share one process group,
   one machine state and one harness. With ``--interleave`` (the default)
   the candidates of each row are timed round-robin, iteration by
   iteration, so drift in the machine's load hits every one alike.
2. Each row's time is the statistic asked for (``p50`` by default: on a
   shared machine the median is the least disturbed figure that still
   reflects every iteration); an op offered both ways is tuned out of
   place, the others in place, as torch.distributed offers them.
3. Per op and measured size, the fastest commlens algorithm wins the size's
   bucket (bucket edges halfway on a log scale between measured sizes); the
   built-in's time is kept for reference (``auto`` runs commlens algorithms
   only).
4. The entries are merged into the table file (an entry for the same op,
   rank count, ranks per host, backend and device is replaced) and written
   atomically.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from commlens.bench.config import BenchConfig, ConfigError
from commlens.bench.events import Event, Finished
from commlens.bench.launcher import BenchFailure, Local, OnCluster, Placement, run
from commlens.results.records import Measurement, Run
from commlens.results.runconfig import BenchSettings

__all__ = ["STATS", "NothingToTune", "SweepFailed", "TuneSettings", "bench_config", "entries_from_run", "tune"]

STATS: tuple[str, ...] = ("p50", "mean", "min")


@dataclass(frozen=True)
class TuneSettings:
    """What ``commlens tune`` sweeps and where it runs; sizes are bench's strings (K/M/G suffixes)."""

    ops: str = "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce"
    min_bytes: str = "8"
    max_bytes: str = "64M"
    step_factor: int = 4
    iters: int = 20
    warmup: int = 5
    check_iters: int = 1
    algos: str = "all"  # commlens candidates; the built-in is always timed too
    chunk_bytes: str | None = None
    interleave: bool = True  # time each row's candidates round-robin (bench --interleave)
    stat: str = "p50"
    backend: str = "gloo"
    device: str = "cpu"
    nproc: int = 4
    cluster: str | None = None
    ranks_per_host: int | None = None
    store: bool = True  # the run is to be stored: it carries ``tag``
    tag: str | None = "tune"

    def __post_init__(self) -> None:
        if self.stat not in STATS:
            raise ConfigError(f"--stat must be one of {', '.join(STATS)}, got {self.stat!r}")
        names = [a.strip().lower() for a in self.algos.split(",") if a.strip()]
        if not names:
            raise ConfigError("--algo: no algorithm given")
        if "auto" in names or "builtin" in names:
            raise ConfigError(
                "--algo: give commlens algorithms to tune (or 'all'); the built-in is always "
                "timed for reference and auto is what tuning decides"
            )


class SweepFailed(BenchFailure):
    """The sweep ran but cannot be tuned on: results were wrong (``wrong``), or it was interrupted. ``run`` is
    what it measured, for the caller to keep."""

    def __init__(self, run: Run, wrong: list[str]):
        super().__init__("the sweep failed (see the errors above); no tuning table written", 1 if wrong else 130)
        self.run = run
        self.wrong = wrong


class NothingToTune(ConfigError):
    """The sweep ran, but no size above 0 bytes ran with a commlens algorithm; ``run`` is what it measured."""

    def __init__(self, run: Run):
        super().__init__(
            "the sweep measured no size above 0 bytes with a commlens algorithm: nothing to tune (raise -b/-e)"
        )
        self.run = run


def bench_config(s: TuneSettings) -> tuple[BenchConfig, Placement]:
    """The sweep's config (``--algo builtin,ALGOS``, the tuning's sizes and timing) and where it runs.

    Built through bench's own option parsing, so a bad size or op is refused with bench's message.
    """
    from commlens.bench.config import build_parser, config_from_args

    ns = build_parser().parse_args([])
    ns.op, ns.algo, ns.min_bytes, ns.max_bytes = s.ops, f"builtin,{s.algos}", s.min_bytes, s.max_bytes
    ns.step_factor, ns.iters, ns.warmup, ns.check_iters = s.step_factor, s.iters, s.warmup, s.check_iters
    ns.backend, ns.device, ns.chunk_bytes, ns.interleave = s.backend, s.device, s.chunk_bytes, s.interleave
    ns.tag = s.tag if s.store else None
    placement: Placement = OnCluster(s.cluster, s.ranks_per_host) if s.cluster is not None else Local(s.nproc)
    return config_from_args(ns), placement


def _time(m: Measurement, stat: str) -> float:
    st = m.stats
    value = {"p50": st.p50_s, "mean": st.mean_s, "min": st.min_s}[stat]
    return float(value if value is not None else st.mean_s)


def _uniform_ranks_per_host(run: Run) -> int:
    counts = set(run.system.ranks_per_host.values())
    return counts.pop() if len(counts) == 1 else run.world_size


def entries_from_run(run: Run, stat: str = "p50") -> list[Any]:
    """Tuning-table entries (:class:`commlens.algos.tuning.Entry`) from a run that timed several algorithms."""
    from commlens.algos import ALGO_OPS
    from commlens.algos.tuning import BUILTIN, entry_from_times

    # op -> size -> algo -> (in_place, time): out of place where the op offers it, else in place
    chosen: dict[str, dict[int, dict[str, tuple[bool, float]]]] = {}
    for m in run.measurements:
        if m.op not in ALGO_OPS or m.algo == "auto":
            continue
        slot = chosen.setdefault(m.op, {}).setdefault(m.size_bytes, {})
        have = slot.get(m.algo)
        if have is None or (have[0] and not m.in_place):
            slot[m.algo] = (m.in_place, _time(m, stat))
    cfg = run.config if isinstance(run.config, BenchSettings) else BenchSettings()
    chunk = cfg.integer("chunk_bytes")
    context = {
        "run_id": run.run_id,
        "fingerprint": run.system.fingerprint(),
        "hosts": len(run.system.hosts) or 1,
        "stat": stat,
        "cpu_model": run.system.cpu_model,
        "torch_version": run.system.torch_version,
        "iters": cfg.number("iters"),
        "dtype": (cfg.names("dtypes") or ("float32",))[0],
    }
    entries = []
    for op, sizes in chosen.items():
        # sizes where some commlens algorithm ran (not every one refused the combination)
        times = {
            size: {algo: t for algo, (_, t) in algos.items()}
            for size, algos in sizes.items()
            if any(a != BUILTIN for a in algos)
        }
        if not any(size > 0 for size in times):
            continue
        entries.append(
            entry_from_times(
                op,
                run.world_size,
                times,
                ranks_per_host=_uniform_ranks_per_host(run),
                backend=run.system.backend,
                device=run.system.device,
                chunk_bytes=chunk,
                context=context,
            )
        )
    return entries


def tune(settings: TuneSettings, *, on_event: Callable[[Event], None] | None = None) -> tuple[Run, list[Any]]:
    """Run the sweep and build the entries; :class:`ConfigError` for bad input, ``BenchFailure`` for a failed run
    (wrong results included). The run is returned for the caller to store; nothing is printed or stored here."""
    config, placement = bench_config(settings)
    wrong: list[str] = []

    def watch(event: Event) -> None:
        if isinstance(event, Finished):
            wrong.extend(event.wrong)
        if on_event is not None:
            on_event(event)

    result = run(config, placement=placement, on_event=watch)
    if wrong or result.status != "complete":
        raise SweepFailed(result, wrong)
    entries = entries_from_run(result, settings.stat)
    if not entries:
        raise NothingToTune(result)
    return result, entries
