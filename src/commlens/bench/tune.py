"""``commlens tune``: time every algorithm (and the built-in collective) per size, keep the fastest per bucket.

Steps (:func:`tune`):

1. One ``commlens bench`` launch runs ``--algo builtin,all`` (or the
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

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commlens.bench.config import ConfigError
from commlens.results.records import Measurement, Run

__all__ = ["STATS", "TuneSettings", "bench_argv", "entries_from_run", "tune"]

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
    db: str | None = None
    store: bool = True
    tag: str | None = "tune"
    quiet: bool = False

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


def bench_argv(s: TuneSettings, json_path: Path) -> list[str]:
    """The ``commlens bench`` arguments of the sweep."""
    argv = [
        "--op",
        s.ops,
        "--algo",
        f"builtin,{s.algos}",
        "-b",
        s.min_bytes,
        "-e",
        s.max_bytes,
        "-f",
        str(s.step_factor),
        "-n",
        str(s.iters),
        "-w",
        str(s.warmup),
        "-c",
        str(s.check_iters),
        "--backend",
        s.backend,
        "--device",
        s.device,
        "--json",
        str(json_path),
    ]
    if s.cluster is not None:
        argv += ["--cluster", s.cluster]
        if s.ranks_per_host is not None:
            argv += ["--ranks-per-host", str(s.ranks_per_host)]
    else:
        argv += ["--nproc", str(s.nproc)]
    if s.chunk_bytes is not None:
        argv += ["--chunk-bytes", s.chunk_bytes]
    if s.interleave:
        argv.append("--interleave")
    if s.store:
        argv += ["--tag", s.tag] if s.tag else []
        argv += ["--db", s.db] if s.db else []
    else:
        argv.append("--no-store")
    if s.quiet:
        argv.append("-q")
    return argv


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
    cfg = run.config
    chunk = cfg.get("chunk_bytes")
    context = {
        "run_id": run.run_id,
        "fingerprint": run.system.fingerprint(),
        "hosts": len(run.system.hosts) or 1,
        "stat": stat,
        "cpu_model": run.system.cpu_model,
        "torch_version": run.system.torch_version,
        "iters": cfg.get("iters"),
        "dtype": (cfg.get("dtypes") or ["float32"])[0],
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


def tune(settings: TuneSettings, *, print_table: bool = False) -> tuple[Run, list[Any]]:
    """Run the sweep and build the entries; :class:`ConfigError` for bad input, ``BenchFailure`` for a failed run."""
    from commlens.bench.launcher import BenchFailure, launch
    from commlens.bench.lifetime import make_workdir
    from commlens.results.jsonfmt import load_run

    workdir = make_workdir("commlens-tune-")
    try:
        json_path = workdir / "run.json"
        code = launch(bench_argv(settings, json_path), print_table=print_table)
        if code != 0:
            raise BenchFailure("the sweep failed (see the errors above); no tuning table written", code)
        run = load_run(json_path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    entries = entries_from_run(run, settings.stat)
    if not entries:
        raise ConfigError(
            "the sweep measured no size above 0 bytes with a commlens algorithm: nothing to tune (raise -b/-e)"
        )
    return run, entries
