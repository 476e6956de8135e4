"""Child processes and temporary directories that do not outlive their launcher, even one killed by SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

__all__ = ["LAUNCHER_PID_ENV", "die_with_parent", "make_workdir", "remove_stale_workdirs"]

LAUNCHER_PID_ENV = "COMMLENS_LAUNCHER_PID"


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux ``PR_SET_PDEATHSIG``).

    Call it in the child (before exec, or first thing in the child's own code). With ``parent_pid``, a
    parent that already died before the request (the child was reparented) kills this process at once.
    """
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


_OWNER_FILE = "launcher.pid"


def make_workdir(prefix: str) -> Path:
    """A private temporary directory that records its owner, so a later launch can remove it if the owner
    was killed (SIGKILL leaves no chance to clean up); stale ones of ``prefix`` are removed first."""
    remove_stale_workdirs(prefix)
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    (workdir / _OWNER_FILE).write_text(str(os.getpid()))
    return workdir


def remove_stale_workdirs(prefix: str) -> list[Path]:
    """Remove this user's ``prefix*`` temporary directories whose recorded owner process is gone."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            if path.stat().st_uid != os.getuid():
                continue
            owner = int((path / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
