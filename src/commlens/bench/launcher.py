"""The one launcher of commlens: start ranks on this host (or on an emulated cluster's hosts) and run them.

``run(config, placement=..., on_event=...)`` is the benchmark as a library: it launches the ranks of
``python -m commlens.bench``, hands rank 0's events to ``on_event`` as they come and returns the finished
:class:`Run`. It prints nothing and stores nothing; a failure is a :class:`BenchFailure` naming the rank
that failed or hung, and where. ``launch_ranks`` is the machinery under it, also used by ``diagnose
links``: the ranks run under ``torch.distributed.launcher.api.elastic_launch`` (what ``torchrun
--standalone`` runs) with a rendezvous store bound to loopback (or the cluster's bridge address), and die
with this process even when it is killed by SIGKILL.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.bench.config import BenchConfig, ConfigError, command_line
from commlens.bench.events import Event, Finished, Started, event_from_wire
from commlens.bench.finalize import run_from_events
from commlens.bench.lifetime import LAUNCHER_PID_ENV, make_workdir
from commlens.bench.rendezvous import BACKEND as RENDEZVOUS
from commlens.bench.rendezvous import LOOPBACK
from commlens.bench.rendezvous import register as register_rendezvous
from commlens.errors import CommlensError
from commlens.results.records import Run

__all__ = [
    "BenchFailure",
    "Local",
    "OnCluster",
    "Placement",
    "Ranks",
    "RanksFailed",
    "check",
    "launch_ranks",
    "place",
    "run",
]

log = logging.getLogger(__name__)

# Errors a rank reports because *another* rank went away, not because it failed itself.
_COLLATERAL = re.compile(
    r"timed out|timeout|connection closed|connection reset|broken pipe|connection refused|"
    r"socket closed|peer|ProcessGroup.*aborted|NCCL communicator was aborted",
    re.IGNORECASE,
)


class BenchFailure(CommlensError, RuntimeError):
    """The run failed; ``code`` is the exit code to use (2 for settings that cannot run, 130 interrupted)."""

    exit_code = 1

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code
        self.exit_code = code


@dataclass(frozen=True)
class Local:
    """``nproc`` ranks on this host, talking over loopback."""

    nproc: int = 4


@dataclass(frozen=True)
class OnCluster:
    """The ranks spread over the hosts of the emulated cluster ``name`` (``commlens cluster up``; needs root),
    ``ranks_per_host`` on each (default: the cluster's)."""

    name: str
    ranks_per_host: int | None = None


Placement = Local | OnCluster


@dataclass(frozen=True)
class Ranks:
    """A placement resolved: how many ranks, the argv prefix that places each, where the store listens."""

    world: int
    prefix: tuple[str, ...] = ()
    store_address: str = LOOPBACK
    env: dict[str, str] = field(default_factory=dict)


def place(placement: Placement) -> Ranks:
    """Resolve a placement; ConfigError for one that cannot run here."""
    if isinstance(placement, Local):
        if placement.nproc < 1:
            raise ConfigError(f"--nproc must be >= 1, got {placement.nproc}")
        # a local run: gloo's and NCCL's listeners on loopback too
        return Ranks(placement.nproc, env={"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"})
    from commlens.cluster import ClusterError, load_state  # the one use of the emulated cluster in bench

    try:
        state = load_state(placement.name)
    except ClusterError as e:
        raise ConfigError(str(e)) from None
    ranks_per_host = placement.ranks_per_host or state.spec.ranks_per_host
    if ranks_per_host < 1:
        raise ConfigError("--ranks-per-host must be >= 1")
    if os.geteuid() != 0:
        raise ConfigError("--cluster needs root (ranks enter network namespaces)")
    # commlens.cluster.place enters the host's namespace and points the rank at the launcher's store through
    # the bridge address, the one address the store listens on.
    prefix = (
        "-m",
        "commlens.cluster.place",
        "--cluster",
        placement.name,
        "--ranks-per-host",
        str(ranks_per_host),
        "--",
    )
    return Ranks(state.spec.hosts * ranks_per_host, prefix, state.bridge_address)


def check(config: BenchConfig, placement: Placement) -> Ranks:
    """Refuse (ConfigError), before any rank starts, a config and placement that cannot run here."""
    ranks = place(placement)
    _check_environment(config, ranks.world)
    return ranks


class RanksFailed(Exception):
    """A rank ended with an error; ``failures`` maps rank to torch's ProcessFailure."""

    def __init__(self, failures: dict[int, Any]):
        super().__init__(f"ranks {sorted(failures)} failed")
        self.failures = failures


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables (which the ranks inherit) for the duration of the launch."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def launch_ranks(module: str, args: list[str], ranks: Ranks, workdir: Path, *, capture_stderr: bool = False) -> bool:
    """Run ``python -m MODULE ARGS`` as ``ranks.world`` ranks (each placed by ``ranks.prefix``) until all end;
    True if interrupted.

    Raises :class:`RanksFailed` when a rank fails (the others are stopped). Each rank gets torch's launcher
    environment (RANK, WORLD_SIZE, LOCAL_RANK, the agent's store) and starts through ``commlens.bench.rank``,
    which makes it die with this process even when this one is killed by SIGKILL. With ``capture_stderr``
    each rank's stderr goes to ``workdir/logs`` (read it with :func:`rank_stderr`) instead of this process's.
    """
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    register_rendezvous()
    addr = ranks.store_address
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=ranks.world,
        run_id=uuid.uuid4().hex,
        rdzv_backend=RENDEZVOUS,
        rdzv_endpoint=f"[{addr}]:0" if ":" in addr else f"{addr}:0",
        rdzv_configs={"rank": 0},
        max_restarts=0,
        monitor_interval=0.05,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(
            log_dir=str(workdir / "logs"), redirects=Std.ERR if capture_stderr else Std.NONE, tee=Std.NONE
        ),
    )
    env = {
        LAUNCHER_PID_ENV: str(os.getpid()),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        **ranks.env,
    }
    try:
        with _environ(env):
            elastic_launch(config, sys.executable)(*ranks.prefix, "-m", "commlens.bench.rank", module, *args)
    except ChildFailedError as e:
        raise RanksFailed(e.failures) from None
    except KeyboardInterrupt:
        return True
    except Exception as e:  # the elastic agent signals Ctrl-C/SIGTERM as SignalException
        if type(e).__name__ != "SignalException":
            raise
        return True
    return False


def rank_stderr(workdir: Path, rank: int) -> str:
    """What rank ``rank`` wrote to stderr under ``launch_ranks(..., capture_stderr=True)`` ("" if nothing)."""
    for path in sorted((workdir / "logs").glob(f"*/attempt_*/{rank}/stderr.log")):
        return path.read_text(errors="replace")
    return ""


class RowsTail:
    """Follows the rows file rank 0 writes, in a thread, handing each event to ``on_event`` in order."""

    def __init__(self, path: Path, on_event: Callable[[Event], None] | None):
        self.path = path
        self.on_event = on_event
        self.events: list[Event] = []
        self._stop = threading.Event()
        self._offset = 0
        self._buffer = ""
        self._thread = threading.Thread(target=self._loop, name="commlens-rows-tail", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path) as fp:
            fp.seek(self._offset)
            chunk = fp.read()
            self._offset = fp.tell()
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            if line.strip():
                self.add(event_from_wire(json.loads(line)))

    def add(self, event: Event) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(0.05)

    def stop(self) -> list[Event]:
        self._stop.set()
        self._thread.join()
        self._poll()
        return self.events


def command_for(config: BenchConfig, placement: Placement) -> str:
    """The ``commlens bench`` command line that runs ``config`` at ``placement``."""
    if isinstance(placement, Local):
        where = ["--nproc", str(placement.nproc)]
    else:
        where = ["--cluster", placement.name]
        where += ["--ranks-per-host", str(placement.ranks_per_host)] if placement.ranks_per_host else []
    return command_line(["commlens", "bench", *config.argv(), *where])


def run(
    config: BenchConfig, *, placement: Placement | None = None, on_event: Callable[[Event], None] | None = None
) -> Run:
    """Run the sweep ``config`` on ``placement`` (default: 4 local ranks) and return the run.

    ``on_event`` is called with each :class:`commlens.bench.events.Event` as rank 0 reports it, in order,
    from a thread of this process. Raises :class:`ConfigError` for settings that cannot run here (before any
    rank starts) and :class:`BenchFailure` when the run fails. Interrupted (Ctrl-C, SIGTERM) after a row
    finished, it returns the rows measured so far with ``status == "incomplete"``; wrong results are in each
    measurement's ``nwrong`` and in the :class:`Finished` event's ``wrong``.
    """
    placement = placement if placement is not None else Local()
    ranks = check(config, placement)
    workdir = make_workdir("commlens-bench-")
    try:
        config_file = workdir / "config.json"
        config_file.write_text(json.dumps(config.as_dict()))
        rows_file = workdir / "rows.jsonl"
        tail = RowsTail(rows_file, on_event)
        failure: BenchFailure | None = None
        interrupted = False
        tail.start()
        try:
            interrupted = launch_ranks(
                "commlens.bench", ["--config-file", str(config_file), "--rows-file", str(rows_file)], ranks, workdir
            )
        except RanksFailed as e:
            failure = explain_failure(workdir, ranks.world, e.failures, config.timeout_s)
        finally:
            events = tail.stop()
        if failure is not None:
            raise failure
        if not any(isinstance(e, Started) for e in events):
            raise BenchFailure("interrupted before the ranks started; nothing stored", 130)
        if interrupted and not any(isinstance(e, Finished) for e in events):
            if on_event is not None:
                on_event(Finished(status="incomplete"))
        result = run_from_events(
            events, command_line=command_for(config, placement), status="incomplete" if interrupted else None
        )
        if interrupted and not result.measurements:
            raise BenchFailure("interrupted before any row finished; nothing stored", 130)
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _check_environment(cfg: BenchConfig, nproc: int) -> None:
    """Refuse, before starting any rank, what cannot run here."""
    import torch

    if nproc < 1:
        raise ConfigError(f"--nproc must be >= 1, got {nproc}")
    # Whether the backend can start here at all was decided when the options were checked (backend_problem).
    if cfg.backend == "nccl" and cfg.device != "cuda":
        raise ConfigError("backend nccl runs on --device cuda only")
    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: no CUDA device is available on this host")
        if nproc > torch.cuda.device_count():
            raise ConfigError(f"--nproc {nproc} exceeds the {torch.cuda.device_count()} CUDA devices here")
    for root in () if cfg.roots == "all" else cfg.roots:
        if root >= nproc:
            raise ConfigError(f"--root {root} is not a rank (world size {nproc})")


@dataclass(frozen=True)
class _RankReport:
    """What a failing rank wrote to ``error-rank{R}.json`` (``commlens.bench.worker._report_error``)."""

    rank: int
    kind: str  # config | unsupported | startup | failure
    message: str
    time: float


def _read_report(path: Path) -> _RankReport | None:
    """A rank's error report; None when it is missing, unreadable or not what a rank writes."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    rank, kind, message, when = data.get("rank"), data.get("kind"), data.get("message"), data.get("time")
    if not (isinstance(rank, int) and isinstance(kind, str) and isinstance(message, str)):
        return None
    if isinstance(when, bool) or not isinstance(when, int | float):
        return None
    return _RankReport(rank, kind, message, float(when))


def explain_failure(workdir: Path, nproc: int, failures: dict[int, Any], timeout_s: float) -> BenchFailure:
    """Name the rank that failed (or hung) and where, from the ranks' own reports."""
    errors = {r: e for r in range(nproc) if (e := _read_report(workdir / f"error-rank{r}.json"))}
    states = {}
    for r in range(nproc):
        p = workdir / f"state-rank{r}.txt"
        if p.exists():
            states[r] = p.read_text()
    for kind, code in (("config", 2), ("unsupported", 2)):
        hits = [e for e in errors.values() if e.kind == kind]
        if hits:
            return BenchFailure(hits[0].message, code)
    late = sorted(r for r in range(nproc) if r not in errors)
    if any(e.kind == "startup" for e in errors.values()) and not states:
        who = f" (rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} had not joined)" if late else ""
        return BenchFailure(f"timed out during start-up after {timeout_s:g} s: raise --timeout{who}", 2)
    primary = sorted((e for e in errors.values() if not _COLLATERAL.search(e.message)), key=lambda e: e.time)
    if primary:
        others = sorted(set(errors) - {e.rank for e in primary})
        tail = f" (ranks {', '.join(map(str, others))} stopped waiting for it)" if others else ""
        return BenchFailure(f"{primary[0].message}{tail}")
    silent = [r for r in range(nproc) if r not in errors]
    if errors and silent:
        where = "; ".join(states.get(r, f"rank {r}: before the first row") for r in silent)
        waiting = ", ".join(map(str, sorted(errors)))
        return BenchFailure(
            f"rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} hung or died without a report "
            f"(last seen: {where}); ranks {waiting} gave up after the {timeout_s:g} s timeout"
        )
    if errors:
        first = min(errors.values(), key=lambda e: e.time)
        return BenchFailure(first.message)
    if failures:
        parts = []
        for r, f in sorted(failures.items()):
            what = (
                getattr(f, "signal_name", lambda: "")() if getattr(f, "exitcode", 0) < 0 else f"exit code {f.exitcode}"
            )
            parts.append(f"rank {r} ended with {what} ({states.get(r, 'before the first row')})")
        return BenchFailure("; ".join(parts))
    return BenchFailure("the benchmark failed without a report from any rank")
