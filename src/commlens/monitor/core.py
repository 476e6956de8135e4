"""The monitor of one rank: the recorder, the window thread, the endpoint, the JSONL file and the store.

The training script's side is two lines (``monitor.start(...)`` after
``init_process_group``, ``monitor.step()`` at the end of each step); see
:mod:`commlens.monitor`.

A window closes every ``window_s`` seconds, or every ``window_steps`` steps
when given. Closing one reads the records completed since the last, groups
them per (group, op, dtype, size bucket) (:func:`commlens.results.collectives.aggregate`),
compares each row's busBW with the cost model's expectation, updates the
metrics, and appends the rows to the JSONL file. The same thread watches the
collectives in flight: one older than ``hang_deadline_s`` makes this rank
dump its Flight Recorder (:mod:`commlens.diagnose.flightrec`) and leave a
marker in the dump directory, on which every other rank that can still act
dumps too; ``commlens diagnose hang DIR`` reads them.

Memory is bounded: the ring (``capacity`` records, about 280 bytes each when
full), the rows kept for the store (``max_rows``), and the JSONL file
(``max_jsonl_bytes``, after which records are no longer written, windows are).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from commlens.errors import CommlensError
from commlens.monitor.expect import Expectations
from commlens.monitor.exporter import EndpointError, MonitorMetrics, RankServer, serve
from commlens.monitor.recorder import DEFAULT_CAPACITY, Recorder
from commlens.results.collectives import WindowRow, aggregate, measurements_from_windows, size_bucket_label
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import Run, SystemInfo
from commlens.results.runconfig import MonitorJob
from commlens.results.units import format_gbps, format_size
from commlens.topology import Topology

__all__ = ["DEFAULT_PORT", "HANG_MARKER", "Monitor", "MonitorConfig", "MonitorError", "jsonl_path"]

log = logging.getLogger("commlens.monitor")

DEFAULT_PORT = 9750  # rank endpoints listen on DEFAULT_PORT + local rank
HANG_MARKER = "commlens-hang.json"  # written into the dump directory by the first rank that sees a hang
BELOW_EXPECTED = 0.5  # a window row below this fraction of the model's busBW is logged as a warning


class MonitorError(CommlensError, ValueError):
    """A monitor that cannot start as configured."""


def jsonl_path(directory: str | os.PathLike[str], rank: int) -> Path:
    return Path(directory) / f"monitor-rank{rank}.jsonl"


@dataclass(frozen=True)
class MonitorConfig:
    """How a rank's monitor windows, exports and watches. Every field has a default."""

    job_id: str | None = None  # default: TORCHELASTIC_RUN_ID / COMMLENS_JOB_ID, else from the rendezvous
    window_s: float = 10.0
    window_steps: int | None = None  # close windows every N steps (``Monitor.step``) instead of by time
    port: int | None = DEFAULT_PORT  # base port; this rank listens on port + local rank; 0: any; None: none
    host: str = "127.0.0.1"
    token: str | None = None  # required to bind anything but loopback (or COMMLENS_MONITOR_TOKEN)
    jsonl_dir: str | None = None  # write monitor-rank<R>.jsonl here
    jsonl_records: bool = True  # every record in the JSONL too (``monitor collect --records`` reads them)
    max_jsonl_bytes: int = 256 << 20
    store: str | None = None  # a store URL: global rank 0 saves the job as a run of source "monitor" at stop
    tag: str | None = None
    revision: str | None = None
    topology: str | Topology | None = "auto"  # a preset name, a topology file, a Topology, "auto" or None
    capacity: int = DEFAULT_CAPACITY
    max_rows: int = 20000  # window rows kept for the store
    keep_samples: int = 256  # durations kept per window row, for the store's samples
    hang_deadline_s: float | None = 300.0
    dump_dir: str | None = None  # Flight Recorder dumps on a hang (default: jsonl_dir/flightrec)
    tick_s: float = 0.5  # how often the window thread wakes
    group_names: dict[Any, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise MonitorError(f"window_s must be a finite number > 0, got {self.window_s}")
        if self.window_steps is not None and self.window_steps < 1:
            raise MonitorError(f"window_steps must be >= 1, got {self.window_steps}")
        if self.port is not None and not 0 <= self.port <= 65535:
            raise MonitorError(f"port must be in 0..65535, got {self.port}")
        if self.hang_deadline_s is not None and not (math.isfinite(self.hang_deadline_s) and self.hang_deadline_s > 0):
            raise MonitorError(f"hang_deadline_s must be > 0 or None, got {self.hang_deadline_s}")
        if not (math.isfinite(self.tick_s) and 0 < self.tick_s <= 60):
            raise MonitorError(f"tick_s must be in (0, 60], got {self.tick_s}")


def _human_size(size_bytes: int) -> str:
    """``67108864`` -> ``64 MiB``, ``399872`` -> ``390.5 KiB``: sizes a gradient bucket has, readable."""
    if size_bytes % 1024 == 0 and size_bytes >= 1024:
        return format_size(size_bytes).replace("K", " KiB").replace("M", " MiB").replace("G", " GiB")
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size_bytes >= unit:
            return f"{size_bytes / unit:.1f} {name}"
    return f"{size_bytes} B"


def _default_topology(device: str) -> str | None:
    if device == "cpu":
        return "local-cpu"
    name = device.lower()
    # the Grace-Blackwell racks before their GPUs' names (a "GB200" names a B200) [27 s25 b300]
    presets = (
        ("gb300", "gb300-nvl72"),
        ("gb200", "gb200-nvl72"),
        ("b300", "dgx-b300"),
        ("b200", "b200"),
        ("h200", "dgx-h200"),
        ("h100", "dgx-h100"),
        ("a100", "dgx-a100"),
    )
    for key, preset in presets:
        if key in name:
            return preset
    return None


def _job_id() -> str:
    for key in ("COMMLENS_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        value = os.environ.get(key, "")
        if value and value != "none":
            return value[:120]
    # The same on every rank of one job: where the ranks met.
    seed = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    return "job-" + hashlib.sha256(seed.encode()).hexdigest()[:12]


class Monitor:
    """One rank's monitor. Build it with :func:`commlens.monitor.start` (or use it as a context manager)."""

    def __init__(self, config: MonitorConfig | None = None) -> None:
        self.config = config or MonitorConfig()
        self.recorder = Recorder(self.config.capacity, group_names=self.config.group_names)
        self.job_id = self.config.job_id or _job_id()
        self.rank = 0
        self.world_size = 1
        self.local_rank = 0
        self.ranks_per_host = 1
        self.backend = ""
        self.device = "cpu"
        self.expectations: Expectations | None = None
        self.metrics: MonitorMetrics | None = None
        self.server: RankServer | None = None
        self.rows: deque[WindowRow] = deque(maxlen=self.config.max_rows)
        self.window = -1
        self.started_at = ""
        self.hang_dumped = False
        self.alerts: list[str] = []  # this rank's below-expectation lines, newest last (bounded)
        self._cursor = 0
        self._window_start = 0.0
        self._window_step = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._jsonl: IO[str] | None = None
        self._jsonl_bytes = 0
        self._jsonl_full = False
        self._below_keys: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()  # one window closes at a time (the thread, or stop())

    # ---- life -------------------------------------------------------------------------------------

    def start(self) -> Monitor:
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            raise MonitorError("torch.distributed is not initialized: call init_process_group before monitor.start")
        cfg = self.config
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.ranks_per_host = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size) or self.world_size)
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank % self.ranks_per_host))
        self.backend = str(dist.get_backend())
        self.device = "cpu"
        if self.backend == "nccl" and torch.cuda.is_available():
            self.device = torch.cuda.get_device_name(torch.cuda.current_device())
        host = os.environ.get("COMMLENS_CLUSTER_HOST") or platform.node()
        self.recorder.host = host
        self.expectations = Expectations(self._topology(), self.backend, self.ranks_per_host)
        self.metrics = MonitorMetrics(self.job_id, self.rank, host)
        token = cfg.token or os.environ.get("COMMLENS_MONITOR_TOKEN") or None
        if cfg.port is not None:
            port = cfg.port + self.local_rank if cfg.port else 0
            try:
                self.server = serve(
                    cfg.host, port, self.metrics.registry, records=self._records, info=self.info, token=token
                )
            except EndpointError as e:
                raise MonitorError(f"rank {self.rank}: {e}") from None
        if cfg.jsonl_dir is not None:
            Path(cfg.jsonl_dir).mkdir(parents=True, exist_ok=True)
            self._jsonl = open(jsonl_path(cfg.jsonl_dir, self.rank), "a", encoding="utf-8")  # noqa: SIM115
            self._write({"type": "job", **self.info()})
        self.started_at = datetime.now(timezone.utc).isoformat()
        self._window_start = time.time()
        self.recorder.step = 0
        self.recorder.install()
        self._thread = threading.Thread(target=self._run, name="commlens-monitor", daemon=True)
        self._thread.start()
        if self.rank == 0:
            log.info("monitoring job %s: %s", self.job_id, self.expectations.description)
        return self

    def _topology(self) -> Topology | None:
        from commlens.topology import load_topology

        choice = self.config.topology
        if isinstance(choice, Topology) or choice is None:
            return choice
        name = _default_topology(self.device) if choice == "auto" else choice
        if name is None:
            return None
        try:
            return load_topology(name)
        except (OSError, ValueError) as e:
            raise MonitorError(f"topology {name!r}: {e}") from None

    def step(self) -> None:
        """Mark the end of a training step (records carry their step; step windows close on it)."""
        if self.recorder.step is not None:
            self.recorder.step += 1

    def stop(self, status: str = "complete") -> Run | None:
        """Close the last window, save the job to the store (rank 0), stop serving. Returns the run saved."""
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join(timeout=30)
        self._thread = None
        self.close_window()
        self.recorder.uninstall()
        run = None
        if self.config.store and self.rank == 0:
            run = self.as_run(status)
            from commlens.store import Store

            with Store.open(self.config.store) as store:
                store.save_run(run)
            log.info("monitor: job %s saved to the store as run %s", self.job_id, run.run_id[:12])
        if self.server is not None:
            self.server.close()
            self.server = None
        if self._jsonl is not None:
            self._write({"type": "end", "status": status, "windows": self.window + 1, "time_s": time.time()})
            self._jsonl.close()
            self._jsonl = None
        return run

    def __enter__(self) -> Monitor:
        return self.start() if self._thread is None else self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        self.stop("complete" if kind is None else "incomplete")

    # ---- what it serves ------------------------------------------------------------------------------

    def info(self) -> JsonObject:
        return {
            "job_id": self.job_id,
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "ranks_per_host": self.ranks_per_host,
            "host": self.recorder.host,
            "backend": self.backend,
            "device": self.device,
            "model": self.expectations.description if self.expectations else "",
            "window_s": self.config.window_s,
            "window_steps": self.config.window_steps,
            "capacity": self.recorder.capacity,
            "pid": os.getpid(),
        }

    def _records(self, after: int, limit: int) -> JsonObject:
        records, cursor, lost = self.recorder.read(after, limit)
        out: JsonObject = {
            "rank": self.rank,
            "next": cursor,
            "lost": lost,
            "records": [r.as_wire() for r in records],
        }
        oldest = self.recorder.oldest_inflight()
        if oldest is not None:
            group, seq, t0 = oldest
            out["inflight"] = {"group": group, "seq": seq, "age_s": time.time() - t0}
        return out

    # ---- windows ------------------------------------------------------------------------------------

    def _run(self) -> None:
        cfg = self.config
        while not self._stop.wait(cfg.tick_s):
            try:
                now = time.time()
                if cfg.window_steps is not None:
                    step = self.recorder.step or 0
                    if step - self._window_step >= cfg.window_steps:
                        self.close_window()
                elif now - self._window_start >= cfg.window_s:
                    self.close_window()
                self._watch_inflight(now)
            except Exception:  # the job must not die of its monitor; say so once per window
                log.exception("monitor: window thread error (the job goes on)")

    def close_window(self) -> list[WindowRow]:
        with self._lock:
            assert self.metrics is not None and self.expectations is not None
            now = time.time()
            records, self._cursor, lost = self.recorder.read(self._cursor)
            self.metrics.add_dropped(lost)
            self.window += 1
            rows = aggregate(
                records, window=self.window, start_s=self._window_start, end_s=now, keep=self.config.keep_samples
            )
            self._window_start = now
            self._window_step = self.recorder.step or 0
            ratios: dict[tuple[str, str, int], float] = {}
            for row in rows:
                self.rows.append(row)
                line = row.as_wire()
                exp = self.expectations.expected(row.op, row.size_bytes, row.group_ranks or ())
                if exp is not None and row.busbw_p50_bytes_per_s > 0:
                    ratio = row.busbw_p50_bytes_per_s / exp.busbw_bytes_per_s
                    ratios[row.key] = ratio
                    line.update(expected_busbw_bytes_per_s=exp.busbw_bytes_per_s, expected_ratio=ratio)
                    if ratio < BELOW_EXPECTED and row.key not in self._below_keys:
                        self._below_keys.add(row.key)  # said once, until it recovers
                        self._below(row, ratio, exp.busbw_bytes_per_s)
                    elif ratio >= BELOW_EXPECTED:
                        self._below_keys.discard(row.key)
                if lost:
                    line["records_lost"] = lost
                self._write({"type": "window", **line})
            self.metrics.update(rows, ratios, self.expectations.model, self.window)
            if self._jsonl is not None and self.config.jsonl_records and not self._jsonl_full:
                for r in records:
                    self._write({"type": "record", **r.as_wire()})
            return rows

    def _below(self, row: WindowRow, ratio: float, expected: float) -> None:
        assert self.expectations is not None
        text = (
            f"{row.op} {_human_size(row.size_bytes)} on the {row.group} group: {ratio:.0%} of expected "
            f"({format_gbps(row.busbw_p50_bytes_per_s)} of {format_gbps(expected)} GB/s busBW; "
            f"{self.expectations.description})"
        )
        self.alerts.append(text)
        del self.alerts[:-100]
        log.warning("rank %d: %s", self.rank, text)

    def _write(self, obj: JsonObject) -> None:
        if self._jsonl is None:
            return
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        if obj.get("type") == "record" and self._jsonl_bytes + len(line) > self.config.max_jsonl_bytes:
            if not self._jsonl_full:
                self._jsonl_full = True
                note = {"type": "note", "text": f"records no longer written: the file reached {self._jsonl_bytes} B"}
                self._jsonl.write(json.dumps(note) + "\n")
            return
        self._jsonl.write(line)
        self._jsonl_bytes += len(line)
        if obj.get("type") != "record":
            self._jsonl.flush()

    # ---- hangs --------------------------------------------------------------------------------------

    def _dump_dir(self) -> Path | None:
        if self.config.dump_dir:
            return Path(self.config.dump_dir)
        if self.config.jsonl_dir:
            return Path(self.config.jsonl_dir) / "flightrec"
        return None

    def _watch_inflight(self, now: float) -> None:
        assert self.metrics is not None
        oldest = self.recorder.oldest_inflight()
        ages: dict[str, float] = {}
        if oldest is not None:
            ages[oldest[0]] = now - oldest[2]
        self.metrics.set_inflight(ages)
        deadline = self.config.hang_deadline_s
        directory = self._dump_dir()
        if deadline is None or directory is None or self.hang_dumped:
            return
        marker = directory / HANG_MARKER
        if oldest is not None and now - oldest[2] > deadline:
            group, seq, t0 = oldest
            reason = (
                f"collective seq {seq} on group {group} in flight {now - t0:.0f} s, over the {deadline:g} s deadline"
            )
            self._hang_dump(directory, reason)
            if not marker.exists():
                from commlens.files import atomic_text

                with atomic_text(marker) as fp:
                    fp.write(json.dumps({"rank": self.rank, "reason": reason, "time_s": now}))
        elif marker.exists():
            try:
                first = json.loads(marker.read_text()[:4096])
                who = f"rank {int(first.get('rank', -1))}"
            except (OSError, ValueError, TypeError, AttributeError):
                who = "another rank"
            self._hang_dump(directory, f"{who} reported a hang")

    def _hang_dump(self, directory: Path, reason: str) -> None:
        from commlens.diagnose import flightrec

        self.hang_dumped = True
        log.error("rank %d: %s; dumping the flight recorder into %s", self.rank, reason, directory)
        directory.mkdir(parents=True, exist_ok=True)
        main = sys._current_frames().get(threading.main_thread().ident or -1)
        try:
            flightrec.dump(
                directory,
                reason=f"commlens monitor: {reason}",
                include_stack_traces=False,
                python_stack=flightrec.stack_of(main),
            )
        except Exception:
            log.exception("rank %d: flight recorder dump failed", self.rank)
        if self._jsonl is not None:
            self._write({"type": "hang", "rank": self.rank, "reason": reason, "dump_dir": str(directory)})

    # ---- the store ----------------------------------------------------------------------------------

    def as_run(self, status: str = "complete") -> Run:
        """This rank's windows as a run of source ``monitor``: one row per (group, op, dtype, size bucket)."""
        import torch

        rows = list(self.rows)
        system = SystemInfo(
            world_size=self.world_size,
            hosts=(self.recorder.host,),
            ranks_per_host={self.recorder.host: self.ranks_per_host},
            backend=self.backend,
            device="cpu" if self.device == "cpu" else "cuda",
            device_names=(self.device,),
            torch_version=torch.__version__,
            python_version=platform.python_version(),
            os=platform.platform(),
        )
        measurements = measurements_from_windows(rows) if rows else []
        run_id = uuid.uuid5(uuid.NAMESPACE_URL, f"commlens-monitor/{self.job_id}/{self.started_at}").hex
        return Run(
            run_id=run_id,
            started_at=self.started_at,
            finished_at=datetime.now(timezone.utc).isoformat(),
            system=system,
            measurements=tuple(m for m in measurements if m.op != "barrier" or m.samples_s),
            status="complete" if status == "complete" else "incomplete",
            tag=self.config.tag,
            revision=self.config.revision,
            source="monitor",
            command_line=" ".join(sys.argv)[:2000],
            config=MonitorJob(
                job_id=self.job_id,
                rank=self.rank,
                window_s=self.config.window_s,
                window_steps=self.config.window_steps,
                model=self.expectations.description if self.expectations else "",
                windows=tuple(rows[-2000:]),
                size_buckets=tuple(sorted({size_bucket_label(r.size_bucket) for r in rows})),
            ),
            notes=tuple(self.alerts[-20:]),
        )
