"""Job side of hang diagnosis: dump PyTorch's Flight Recorder when a job fails.

On NCCL, PyTorch writes the recorder itself when a collective times out. On
gloo (torch 2.13) it never does: the recorder records every collective but
nothing is written on a timeout. A training script calls :func:`install` once,
after ``init_process_group``; from then on each rank writes its recorder into
``dump_dir`` as ``fr_trace_rank_<rank>`` (PyTorch's pickle format, the same
bytes ``torchfrtrace`` reads) when:

- an exception escapes the main thread (a collective's timeout or error
  raised out of the training loop), through ``sys.excepthook``;
- the process receives SIGTERM (``torchrun`` sends it to the surviving ranks
  when one rank fails), after which the previous handler runs;
- the process receives SIGUSR1 (on demand from outside: ``kill -USR1 PID``);
- the script calls :func:`dump` (on demand from inside).

Each dump also carries ``rank``, ``dump_reason`` and ``python_stack`` (where
the main thread was). ``commlens diagnose hang DIR`` reads the directory.

Measured on torch 2.13 + gloo, and why the mechanics below exist:

- A rank stuck inside a collective never returns to the interpreter, so a
  Python signal handler would never run. :func:`install` therefore also
  points ``signal.set_wakeup_fd`` at a pipe read by a watcher thread, which
  dumps as soon as the signal arrives (collectives release the GIL while they
  wait). This replaces any wakeup fd set before (an asyncio loop's).
- While a collective is stuck, ``_dump_fr_trace(includeStackTraces=True)``
  never returns and holds the GIL, freezing the process. The dump without
  stack traces is always safe; the one with them runs in a forked child that
  is killed if it takes longer than ``_STACKS_TIMEOUT_S``, and the stackless
  dump is kept. The first symbolization in a process takes about 5 s on the
  development machine (2 cores), so a dump with stack traces costs that much.
- A rank killed by SIGABRT (gloo aborts a rank on some mismatches, e.g. a
  byte-count mismatch: ``EnforceNotMet ... Received data size doesn't match``)
  or SIGKILL leaves no dump; the analysis names such a rank as the first
  suspect (``pg_config`` and the file names show that it should have one).

The recorder's own bytes are read back with the same plain-data unpickler
the analysis uses (:func:`commlens.ingest.flightrec.loads_plain`).
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from commlens.files import atomic_bytes
from commlens.ingest.flightrec import loads_plain

__all__ = ["DUMP_PREFIX", "dump", "dump_path", "install", "stack_of", "uninstall"]

log = logging.getLogger(__name__)

DUMP_PREFIX = "fr_trace_rank_"

_state: dict[str, Any] = {}


def dump_path(dump_dir: str | os.PathLike[str], rank: int) -> Path:
    """Where rank ``rank`` writes its dump inside ``dump_dir``."""
    return Path(dump_dir) / f"{DUMP_PREFIX}{rank}"


def _rank() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _frames(frame: FrameType | None) -> list[dict[str, Any]]:
    """A Python stack, innermost first, in the recorder's own frame layout."""
    out = []
    while frame is not None:
        if frame.f_code.co_filename != __file__:  # not this module's own handlers
            out.append({"name": frame.f_code.co_name, "filename": frame.f_code.co_filename, "line": frame.f_lineno})
        frame = frame.f_back
    return out


# The first symbolization in a process takes ~5 s here (measured, torch 2.13 CPU); the
# child starts cold every time, so the bound is generous.
_STACKS_TIMEOUT_S = 20.0


def stack_of(frame: FrameType | None) -> list[dict[str, Any]]:
    """A thread's Python stack as a dump's ``python_stack`` (innermost frame first), from its current frame."""
    return _frames(frame)


def _dump_with_stacks(timeout_s: float) -> dict[str, Any] | None:
    """The recorder with its entries' Python stack traces, or None if that would hang.

    Measured on torch 2.13 + gloo: while a collective is stuck (e.g. a peer
    sent a different byte count), ``_dump_fr_trace(includeStackTraces=True)``
    never returns and holds the GIL, freezing every thread of the process.
    So the symbolizing dump runs in a forked child, which gets the recorder's
    memory as it is; a child still busy after ``timeout_s`` is killed.
    """
    # torch's _distributed_c10d.pyi declares _dump_fr_trace from 2.15 (before, only the extension exports it).
    from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined, unused-ignore]

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: dump, hand the bytes over, leave without running any cleanup
        code = 1
        try:
            # A hung child must not outlive its parent (the parent may be SIGKILLed while
            # waiting): the kernel ends it when the alarm fires, GIL or not.
            signal.set_wakeup_fd(-1)  # signals to the child must not reach the parent's watcher
            for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGALRM):
                signal.signal(signum, signal.SIG_DFL)
            signal.alarm(int(timeout_s) + 1)
            os.close(read_fd)
            data = _dump_fr_trace(includeStackTraces=True)
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_fd], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                log.warning("flight recorder dump with stack traces timed out; kept the one without")
                return None
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    try:
        full = loads_plain(b"".join(chunks))
    except (pickle.UnpicklingError, EOFError):
        return None
    return full if isinstance(full, dict) else None


def dump(
    dump_dir: str | os.PathLike[str] | None = None,
    reason: str = "on demand",
    include_stack_traces: bool | None = None,
    python_stack: list[dict[str, Any]] | None = None,
) -> Path:
    """Write this rank's Flight Recorder into ``dump_dir`` now and return the file.

    ``dump_dir`` defaults to the directory given to :func:`install`. The dump
    is PyTorch's pickle with three keys added: ``rank``, ``dump_reason`` and
    ``python_stack`` (where this rank's main thread was, innermost frame
    first; the caller's stack when not given). It is written to a temporary
    name and renamed, so a reader never sees half a dump; a later dump of the
    same rank replaces an earlier one.
    """
    # torch's _distributed_c10d.pyi declares _dump_fr_trace from 2.15 (before, only the extension exports it).
    from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined, unused-ignore]

    if dump_dir is None:
        if "dump_dir" not in _state:
            raise RuntimeError("flightrec.dump() needs a directory: call install(dump_dir) first")
        dump_dir = _state["dump_dir"]
    if python_stack is None:
        python_stack = _frames(sys._getframe(1))
    if include_stack_traces is None:
        include_stack_traces = _state.get("stack_traces", True)
    rank = _rank()
    target = dump_path(dump_dir, rank)
    # No lock: a signal handler may interrupt a dump in progress on the same thread.
    # Without stack traces the dump cannot block; with them it can (see _dump_with_stacks).
    trace = loads_plain(_dump_fr_trace(includeStackTraces=False))
    if include_stack_traces:
        full = _dump_with_stacks(_STACKS_TIMEOUT_S)
        if full is not None:
            trace = full
    trace.update(rank=rank, dump_reason=reason, python_stack=python_stack)
    with atomic_bytes(target) as fp:  # a unique temporary file: safe from any thread or signal handler
        fp.write(pickle.dumps(trace))
    log.info("flight recorder dumped to %s (%s)", target, reason)
    return target


def _excepthook(kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
    tb = traceback
    try:
        stack: list[
            dict[str, Any]
        ] = []  # where the exception was raised, innermost first, with the traceback's line numbers
        while tb is not None:
            code = tb.tb_frame.f_code
            stack.insert(0, {"name": code.co_name, "filename": code.co_filename, "line": tb.tb_lineno})
            tb = tb.tb_next
        # Kept for the signal handlers: a SIGTERM arriving during this dump is dumped with this stack.
        _state["exception_stack"] = stack
        dump(reason=f"uncaught {kind.__name__}: {value}", python_stack=_state["exception_stack"])
    except Exception:  # the job is failing already; the original error is what matters
        log.exception("flight recorder dump failed")
    _state["previous_excepthook"](kind, value, traceback)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Python-level handler, run by the main thread once it is back in the interpreter."""
    if _claim(signum):
        try:
            stack = _state.get("exception_stack") or _frames(frame)
            dump(reason=f"signal {signal.Signals(signum).name}", python_stack=stack)
        except Exception:
            log.exception("flight recorder dump failed")
    else:  # the watcher thread got there first: let it finish before the process goes
        _watcher_done.wait(_STACKS_TIMEOUT_S + 5.0)
    if signum == signal.SIGUSR1:
        return
    _exit_requested.set()
    _chain(signum, frame)


def _claim(signum: int) -> bool:
    """True for the first of the two handlers (Python-level, watcher) to see this signal delivery."""
    with _claim_lock:
        pending = _state["pending"]
        if signum in pending:
            pending.discard(signum)
            return False
        pending.add(signum)
        _watcher_done.clear()
        return True


_claim_lock = threading.Lock()
_watcher_done = threading.Event()


def _chain(signum: int, frame: FrameType | None) -> None:
    previous = _state["previous_handlers"].get(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # SIG_DFL: die of the signal, as the launcher expects
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _watch(read_fd: int, signums: frozenset[int]) -> None:
    """Dump as soon as a signal arrives, even while the main thread is blocked in a collective.

    A Python signal handler only runs when the main thread returns to the
    interpreter, which a rank stuck inside a gloo or NCCL call may never do.
    The C-level handler writes the signal number to the wakeup fd at once;
    this thread reads it, dumps (collectives release the GIL while they wait)
    and, for SIGTERM, ends the process if the main thread has not within
    ``_GRACE_S``.
    """
    while True:
        data = os.read(read_fd, 64)
        if not data:  # uninstall() closed the write end
            os.close(read_fd)
            return
        for signum in set(data) & signums:
            if not _claim(signum):
                continue
            try:
                main_ident = threading.main_thread().ident  # None only for a thread not yet started
                main = sys._current_frames().get(main_ident) if main_ident is not None else None
                stack = _state.get("exception_stack") or _frames(main)
                # No forked symbolizing dump from this thread: os.fork() waits for the import
                # lock, which the interrupted main thread may hold (measured: a deadlock).
                dump(reason=f"signal {signal.Signals(signum).name}", include_stack_traces=False, python_stack=stack)
            except Exception:
                log.exception("flight recorder dump failed")
            finally:
                _watcher_done.set()
            if signum != signal.SIGUSR1 and not _exit_requested.wait(_GRACE_S):
                os._exit(128 + signum)


_GRACE_S = 2.0
_exit_requested = threading.Event()


def install(
    dump_dir: str | os.PathLike[str],
    signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1),
    stack_traces: bool = True,
) -> Path:
    """Dump this rank's Flight Recorder into ``dump_dir`` on failure, SIGTERM and SIGUSR1.

    Call once per process, from the main thread, after ``init_process_group``
    (the rank names the file). Returns the path this rank will write.
    ``stack_traces=False`` skips the entries' Python stacks (and the ~5 s they
    cost); ``python_stack`` is recorded either way. The recorder itself is on
    by default (``TORCH_FR_BUFFER_SIZE`` entries, 2,000 unless set); it must
    not be set to 0.
    """
    if os.environ.get("TORCH_FR_BUFFER_SIZE", "").strip() == "0":
        raise RuntimeError("TORCH_FR_BUFFER_SIZE=0 disables the flight recorder; nothing could be dumped")
    Path(dump_dir).mkdir(parents=True, exist_ok=True)
    uninstall()
    _state["dump_dir"] = Path(dump_dir)
    _state["stack_traces"] = stack_traces
    _state["previous_excepthook"] = sys.excepthook
    sys.excepthook = _excepthook
    handlers: dict[int, Callable[..., Any] | int | None] = {}
    for signum in signals:
        handlers[signum] = signal.getsignal(signum)
        signal.signal(signum, _on_signal)
    _state["previous_handlers"] = handlers
    _state["pending"] = set()
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    _state["wakeup"] = (write_fd, signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False))
    threading.Thread(target=_watch, args=(read_fd, frozenset(signals)), name="commlens-flightrec", daemon=True).start()
    return dump_path(dump_dir, _rank())


def uninstall() -> None:
    """Restore the exception hook and signal handlers :func:`install` replaced."""
    if "previous_excepthook" in _state:
        sys.excepthook = _state.pop("previous_excepthook")
    for signum, handler in _state.pop("previous_handlers", {}).items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if "wakeup" in _state:
        write_fd, previous_fd = _state.pop("wakeup")
        signal.set_wakeup_fd(previous_fd)
        os.close(write_fd)  # the watcher thread sees end-of-file, closes its end and stops
    _state.pop("dump_dir", None)
    _state.pop("stack_traces", None)
    _state.pop("exception_stack", None)
