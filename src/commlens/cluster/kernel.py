"""Thin calls to ``ip`` and ``tc``, and the CPU cgroup; every failure becomes a ClusterError with the command."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

from commlens.cluster.spec import ClusterError

__all__ = ["cgroup_dir", "run", "set_cpu_quota", "try_run"]

log = logging.getLogger(__name__)


def run(*argv: str) -> str:
    """Run a command; its stdout, or ClusterError naming the command and its stderr."""
    log.debug("run: %s", " ".join(argv))
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"`{' '.join(argv)}` failed: {proc.stderr.strip() or f'exit code {proc.returncode}'}")
    return proc.stdout


def try_run(*argv: str) -> bool:
    """Run a command whose failure is expected when the object is already gone; True when it succeeded."""
    return subprocess.run(argv, capture_output=True).returncode == 0


def _cgroup_root() -> tuple[Path, str]:
    """(directory under which CPU cgroups are made, 'v1' or 'v2')."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, "v1"
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists() and "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
        return v2, "v2"
    raise ClusterError("no CPU cgroup controller found (neither cgroup v1 cpu nor v2 cpu.max): cannot starve a host")


def cgroup_dir(name: str) -> Path:
    return _cgroup_root()[0] / name


def set_cpu_quota(name: str, cpu_fraction: float) -> Path:
    """Create (or update) cgroup ``name`` capped at ``cpu_fraction`` of one CPU; returns its directory."""
    root, version = _cgroup_root()
    path = root / name
    path.mkdir(exist_ok=True)
    # A short CFS period (10 ms; longer only where the quota would fall under the kernel's 1 ms minimum) makes the
    # host uniformly slow, as a slower CPU is. Under the default 100 ms period a rank at 0.1 CPU ran a few fast
    # steps, then sat throttled for 90 ms: late at one step in several, which a median does not see.
    period_us = max(10_000, int(round(1000 / cpu_fraction))) if cpu_fraction > 0 else 10_000
    quota_us = max(1000, int(cpu_fraction * period_us))
    if version == "v1":
        (path / "cpu.cfs_period_us").write_text(str(period_us))
        (path / "cpu.cfs_quota_us").write_text(str(quota_us))
    else:
        (path / "cpu.max").write_text(f"{quota_us} {period_us}")
    return path


def remove_cgroup(path: str) -> None:
    """Remove a cgroup made by ``set_cpu_quota``, killing what still runs in it (ranks of a crashed job)."""
    p = Path(path)
    if not p.exists():
        return
    for pid in (p / "cgroup.procs").read_text().split():
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass
    for _ in range(50):  # killed processes leave the cgroup when they are reaped
        try:
            p.rmdir()
            return
        except OSError as e:
            error = e
            time.sleep(0.05)
    raise ClusterError(f"cannot remove cgroup {p}: {error}")
