"""Watch a live training job's collectives: record them on every rank, window them, export, compare, detect.

In a training script, after ``init_process_group``::

    from commlens import monitor

    mon = monitor.start(window_s=10, jsonl_dir="monitor/")   # or: with monitor.Monitor(...) as mon:
    monitor.watch_ddp(model)                                 # a DDP model: its all-reduces through Python
    for batch in data:
        ...
        monitor.step()
    monitor.stop()

Every rank then serves Prometheus metrics on ``127.0.0.1:9750 + local rank``
(``/metrics``) and its recent records (``/records``) for ``commlens monitor
collect``, which joins the ranks and names stragglers, slow groups and
slowdowns (:mod:`commlens.monitor.collect`). The parts:

- :mod:`~commlens.monitor.recorder`: the hot path (wrappers, the ring);
- :mod:`~commlens.monitor.core`: windows, expectations, JSONL, store, hangs;
- :mod:`~commlens.monitor.exporter`: the metrics and the HTTP endpoint;
- :mod:`~commlens.monitor.expect`: the cost model's expectation.
"""

from __future__ import annotations

from typing import Any

from commlens.monitor.core import DEFAULT_PORT, Monitor, MonitorConfig, MonitorError, jsonl_path

__all__ = [
    "DEFAULT_PORT",
    "Monitor",
    "MonitorConfig",
    "MonitorError",
    "current",
    "jsonl_path",
    "name_group",
    "start",
    "step",
    "stop",
    "watch_ddp",
]

_current: Monitor | None = None


def start(config: MonitorConfig | None = None, **settings: Any) -> Monitor:
    """Start this rank's monitor (``settings`` are :class:`MonitorConfig` fields); one per process."""
    global _current
    if _current is not None:
        raise MonitorError("a monitor is already running in this process: call monitor.stop() first")
    if config is not None and settings:
        raise MonitorError("give a MonitorConfig or settings, not both")
    mon = Monitor(config or MonitorConfig(**settings))
    mon.start()
    _current = mon
    return mon


def current() -> Monitor | None:
    return _current


def step() -> None:
    """Mark the end of a training step (no-op without a running monitor)."""
    if _current is not None:
        _current.step()


def name_group(group: Any, name: str) -> None:
    """Label a process group (``"dp"``, ``"tp"``) in records, metrics and alerts."""
    if _current is None:
        raise MonitorError("no monitor is running: call monitor.start() first")
    _current.recorder.name_group(group, name)


def watch_ddp(model: Any, process_group: Any = None) -> bool:
    """Route a DDP model's gradient all-reduces through ``torch.distributed`` so they are recorded."""
    if _current is None:
        raise MonitorError("no monitor is running: call monitor.start() first")
    return _current.recorder.watch_ddp(model, process_group)


def stop(status: str = "complete") -> Any:
    """Stop this rank's monitor; returns the run saved to the store (rank 0 with ``store=``), else None."""
    global _current
    mon, _current = _current, None
    return mon.stop(status) if mon is not None else None
