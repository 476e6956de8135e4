"""``commlens bench``: launch local ranks through torch's elastic launcher and own the terminal.

The workers (``python -m commlens.bench``) run under
``torch.distributed.launcher.api.elastic_launch``, the machinery behind
``torchrun --standalone``. Rank 0 streams events into a rows file; this
process prints the table and the progress from it, then stores the run. On a
rank failure it reads each rank's error and state files to say which rank
failed or hung, and where.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from commlens.bench.config import ConfigError, build_parser, command_line, config_from_args
from commlens.bench.finalize import TablePrinter, exit_code, run_from_events
from commlens.bench.lifetime import LAUNCHER_PID_ENV, make_workdir
from commlens.bench.outputs import SaveError, check_destinations, save_outputs
from commlens.bench.rendezvous import BACKEND as RENDEZVOUS
from commlens.bench.rendezvous import LOOPBACK
from commlens.bench.rendezvous import register as register_rendezvous

__all__ = ["launch", "BenchFailure"]

log = logging.getLogger(__name__)

# Errors a rank reports because *another* rank went away, not because it failed itself.
_COLLATERAL = re.compile(
    r"timed out|timeout|connection closed|connection reset|broken pipe|connection refused|"
    r"socket closed|peer|ProcessGroup.*aborted|NCCL communicator was aborted",
    re.IGNORECASE,
)


class BenchFailure(RuntimeError):
    """The run failed; ``code`` is the exit code to use."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class RowsTail:
    """Follows the rows file in a thread, feeding each event to the printer and progress."""

    def __init__(self, path: Path, printer: TablePrinter, progress: Any | None, task: Any | None):
        self.path = path
        self.printer = printer
        self.progress = progress
        self.task = task
        self.events: list[dict[str, Any]] = []
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
                self._handle(json.loads(line))

    def _handle(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event["event"] == "progress":
            if self.progress is not None:
                desc = f"{event['op']} {event['dtype']} {event['size_bytes']} B"
                self.progress.update(self.task, total=event["total"], completed=event["index"], description=desc)
            return
        if event["event"] == "end" and self.progress is not None:
            self.progress.update(self.task, completed=self.progress.tasks[0].total or 0)
        self.printer.handle(event)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(0.05)

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join()
        self._poll()
        return self.events


def _check_environment(cfg: Any, nproc: int) -> None:
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
    for root in cfg.roots:
        if root >= nproc:
            raise ConfigError(f"--root {root} is not a rank (world size {nproc})")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def explain_failure(workdir: Path, nproc: int, failures: dict[int, Any], timeout_s: float) -> BenchFailure:
    """Name the rank that failed (or hung) and where, from the ranks' own reports."""
    errors = {r: e for r in range(nproc) if (e := _read_json(workdir / f"error-rank{r}.json"))}
    states = {}
    for r in range(nproc):
        p = workdir / f"state-rank{r}.txt"
        if p.exists():
            states[r] = p.read_text()
    for kind, code in (("config", 2), ("unsupported", 2)):
        hits = [e for e in errors.values() if e["kind"] == kind]
        if hits:
            return BenchFailure(hits[0]["message"], code)
    late = sorted(r for r in range(nproc) if r not in errors)
    if any(e["kind"] == "startup" for e in errors.values()) and not states:
        who = f" (rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} had not joined)" if late else ""
        return BenchFailure(f"timed out during start-up after {timeout_s:g} s: raise --timeout{who}", 2)
    primary = sorted((e for e in errors.values() if not _COLLATERAL.search(e["message"])), key=lambda e: e["time"])
    if primary:
        others = sorted(set(errors) - {e["rank"] for e in primary})
        tail = f" (ranks {', '.join(map(str, others))} stopped waiting for it)" if others else ""
        return BenchFailure(f"{primary[0]['message']}{tail}")
    silent = [r for r in range(nproc) if r not in errors]
    if errors and silent:
        where = "; ".join(states.get(r, f"rank {r}: before the first row") for r in silent)
        waiting = ", ".join(map(str, sorted(errors)))
        return BenchFailure(
            f"rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} hung or died without a report "
            f"(last seen: {where}); ranks {waiting} gave up after the {timeout_s:g} s timeout"
        )
    if errors:
        first = min(errors.values(), key=lambda e: e["time"])
        return BenchFailure(first["message"])
    if failures:
        parts = []
        for r, f in sorted(failures.items()):
            what = (
                getattr(f, "signal_name", lambda: "")() if getattr(f, "exitcode", 0) < 0 else f"exit code {f.exitcode}"
            )
            parts.append(f"rank {r} ended with {what} ({states.get(r, 'before the first row')})")
        return BenchFailure("; ".join(parts))
    return BenchFailure("the benchmark failed without a report from any rank")


def _cluster_placement(name: str, ranks_per_host: int | None) -> tuple[int, list[str], str]:
    """(world size, entry-point prefix, store address) that put each rank on its host of cluster ``name``.

    The prefix runs ``commlens.cluster.place``, which enters the host's namespace and points the rank at the
    launcher's store through the bridge address, the one address the store listens on.
    """
    from commlens.cluster import ClusterError, load_state  # the one use of the emulated cluster in bench

    try:
        state = load_state(name)
    except ClusterError as e:
        raise ConfigError(str(e)) from None
    per_host = ranks_per_host or state.spec.ranks_per_host
    if per_host < 1:
        raise ConfigError("--ranks-per-host must be >= 1")
    if os.geteuid() != 0:
        raise ConfigError("--cluster needs root (ranks enter network namespaces)")
    prefix = ["-m", "commlens.cluster.place", "--cluster", name, "--ranks-per-host", str(per_host), "--"]
    return state.spec.hosts * per_host, prefix, state.bridge_address


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


def launch(argv: list[str], *, print_table: bool = True) -> int:
    """Run ``commlens bench`` with ``argv``; returns the exit code. ``print_table=False``: progress only."""
    ns = build_parser().parse_args(argv)
    if ns.algo.strip().lower() == "list":
        from commlens.bench.algorithms import algo_listing

        print("\n".join(algo_listing()))
        return 0
    cfg = config_from_args(ns)
    placement: list[str] = []
    store_addr = LOOPBACK
    rank_env = {LAUNCHER_PID_ENV: str(os.getpid())}
    if ns.cluster is not None:
        ns.nproc, placement, store_addr = _cluster_placement(ns.cluster, ns.ranks_per_host)
    else:  # a local run: gloo's and NCCL's listeners on loopback too
        rank_env.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
    _check_environment(cfg, ns.nproc)
    check_destinations(ns)

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    register_rendezvous()
    console = Console(highlight=False, soft_wrap=True)
    say_err = Console(stderr=True, highlight=False, soft_wrap=True)
    show_progress = not ns.quiet and console.is_terminal
    progress = task = None
    if show_progress:
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        task = progress.add_task("starting ranks", total=None)

    rank_env.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    workdir = make_workdir("commlens-bench-")
    try:
        rows_file = workdir / "rows.jsonl"
        printer = TablePrinter(
            (lambda line: console.print(line, markup=False, highlight=False)) if print_table else (lambda line: None)
        )
        tail = RowsTail(rows_file, printer, progress, task)
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=ns.nproc,
            run_id=uuid.uuid4().hex,
            rdzv_backend=RENDEZVOUS,
            rdzv_endpoint=f"[{store_addr}]:0" if ":" in store_addr else f"{store_addr}:0",
            rdzv_configs={"rank": 0},
            max_restarts=0,
            monitor_interval=0.05,
            start_method="spawn",
            logs_specs=DefaultLogsSpecs(log_dir=str(workdir / "logs"), redirects=Std.NONE, tee=Std.NONE),
        )
        worker_argv = [*placement, "-m", "commlens.bench", *argv, "--rows-file", str(rows_file)]
        failure: BenchFailure | None = None
        interrupted = False
        if progress is not None:
            progress.start()
        tail.start()
        try:
            with _environ(rank_env):
                elastic_launch(config, sys.executable)(*worker_argv)
        except ChildFailedError as e:
            failure = explain_failure(workdir, ns.nproc, e.failures, cfg.timeout_s)
        except KeyboardInterrupt:
            interrupted = True
        except Exception as e:  # noqa: BLE001 - the elastic agent signals Ctrl-C/SIGTERM as SignalException
            if type(e).__name__ != "SignalException":
                raise
            interrupted = True
        finally:
            events = tail.stop()
            if progress is not None:
                progress.stop()
        if failure is not None:
            raise failure
        if not any(e["event"] == "start" for e in events):
            raise BenchFailure("interrupted before the ranks started; nothing stored", 130)
        if interrupted and not any(e["event"] == "end" for e in events):
            printer.handle({"event": "end", "status": "incomplete", "wrong": [], "finished_at": None})
        run = run_from_events(
            events,
            command_line=command_line(["commlens", "bench", *argv]),
            status="incomplete" if interrupted else None,
        )
        if interrupted and not run.measurements:
            raise BenchFailure("interrupted before any row finished; nothing stored", 130)
        try:
            save_outputs(run, ns, lambda s: say_err.print(s, markup=False))
        except SaveError as e:
            raise BenchFailure(str(e), 1) from None
        end = next((e for e in events if e["event"] == "end"), {"wrong": []})
        return exit_code(run, end.get("wrong", []), lambda s: say_err.print(s, markup=False))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
