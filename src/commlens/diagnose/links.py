"""``diagnose links``: all-pairs bandwidth and latency, a ring check, slow hosts and slow links located.

As a worker under any launcher (one rank per host)::

    torchrun --nnodes 8 --nproc-per-node 1 ... -m commlens.diagnose.links --json links.json

Rank 0 prints the matrix and the faults and exits 1 when it found one. ``run_links`` launches the ranks
itself (on an emulated cluster, each through a command prefix that places it on its host). The steps
of the detection are in ``links_analysis.diagnose_links``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from commlens.bench.lifetime import die_with_parent
from commlens.bench.rendezvous import group_store
from commlens.diagnose.links_analysis import (
    LinkDiagnosis,
    LinkFault,
    Thresholds,
    diagnose_links,
)
from commlens.diagnose.links_measure import LinkProbe, measure
from commlens.diagnose.links_report import format_report, write_heatmap

__all__ = [
    "LinkDiagnosis",
    "LinkFault",
    "LinkProbe",
    "LinksFailure",
    "Thresholds",
    "diagnose_links",
    "format_report",
    "main",
    "run_links",
    "write_heatmap",
]


class LinksFailure(RuntimeError):
    """The measurement itself failed (a rank died or timed out)."""


def _probe_args(probe: LinkProbe) -> list[str]:
    return [
        "--size-bytes",
        str(probe.size_bytes),
        "--iters",
        str(probe.iters),
        "--warmup",
        str(probe.warmup),
        "--passes",
        str(probe.passes),
        "--latency-iters",
        str(probe.latency_iters),
    ] + ([] if probe.ring else ["--no-ring"])


def run_links(
    world: int,
    place: Callable[[int, list[str]], list[str]],
    probe: LinkProbe,
    master_addr: str,
    master_port: int = 29511,
    timeout_s: float = 120.0,
    extra_env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Start ``world`` ranks (``place(rank, python_args)`` gives each one's argv), return rank 0's records.

    Every rank is killed in ``finally``, and by the kernel if this process itself is killed.
    """
    workdir = Path(tempfile.mkdtemp(prefix="commlens-links-"))
    raw = workdir / "raw.json"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(world):
            loopback = {"GLOO_SOCKET_IFNAME": "lo"} if master_addr.startswith("127.") else {}
            env = {
                **os.environ,
                **loopback,
                **(extra_env or {}),
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": "0",
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "OMP_NUM_THREADS": "1",
            }
            argv = place(
                rank,
                [
                    "-m",
                    "commlens.diagnose.links",
                    *_probe_args(probe),
                    "--timeout",
                    str(timeout_s),
                    "--raw-out",
                    str(raw),
                ],
            )
            with open(workdir / f"rank{rank}.err", "wb") as err:
                procs.append(
                    subprocess.Popen(
                        argv,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        start_new_session=True,
                        preexec_fn=die_with_parent,
                    )
                )  # noqa: PLW1509 - no threads yet
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
        hung = [r for r, p in enumerate(procs) if p.returncode is None]
        if failed or hung:
            r = (failed or hung)[0]
            err = (workdir / f"rank{r}.err").read_text(errors="replace").strip().splitlines()
            what = f"rank {r} failed" if failed else f"ranks {hung} did not finish within {timeout_s:g} s"
            raise LinksFailure(f"{what}{': ' + err[-1] if err else ''}")
        return json.loads(raw.read_text())["records"]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for f in workdir.iterdir():
            f.unlink()
        workdir.rmdir()


def _seconds(text: str) -> float:
    """``--timeout`` of a rank: a finite number of seconds > 0 (``nan`` would fail deep inside timedelta)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m commlens.diagnose.links",
        description="All-pairs bandwidth/latency and fault location; one rank per host.",
    )
    p.add_argument("--size-bytes", type=int, default=LinkProbe.size_bytes)
    p.add_argument("--iters", type=int, default=LinkProbe.iters)
    p.add_argument("--warmup", type=int, default=LinkProbe.warmup)
    p.add_argument("--passes", type=int, default=LinkProbe.passes)
    p.add_argument("--latency-iters", type=int, default=LinkProbe.latency_iters)
    p.add_argument("--no-ring", action="store_true")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--timeout", type=_seconds, default=120.0, help="seconds before a rank gives up")
    p.add_argument("--json", dest="json_path", default=None, help="write the diagnosis as JSON ('-' for stdout)")
    p.add_argument("--heatmap", default=None, help="write the bandwidth heatmap PNG")
    p.add_argument("--raw-out", default=None, help="write rank 0's raw records here instead of a diagnosis")
    return p


def main(argv: list[str] | None = None) -> int:
    """One rank's entry point; rank 0 reports. Exit code 1 when a fault is found."""
    import torch.distributed as dist

    ns = _parser().parse_args(argv)
    probe = LinkProbe(
        size_bytes=ns.size_bytes,
        iters=ns.iters,
        warmup=ns.warmup,
        passes=ns.passes,
        latency_iters=ns.latency_iters,
        ring=not ns.no_ring,
    )
    bound = group_store(ns.timeout)  # rank 0 serves the store on MASTER_ADDR only, not every interface
    if bound is None:
        dist.init_process_group(ns.backend, timeout=dt.timedelta(seconds=ns.timeout))
    else:
        store, rank, world_size = bound
        dist.init_process_group(
            ns.backend, timeout=dt.timedelta(seconds=ns.timeout), store=store, rank=rank, world_size=world_size
        )
    try:
        records = measure(probe)
        world = dist.get_world_size()
    finally:
        dist.destroy_process_group()
    if records is None:
        return 0
    if ns.raw_out:
        tmp = Path(ns.raw_out + ".tmp")
        tmp.write_text(json.dumps({"format": "commlens.links-raw/1", "records": records}))
        tmp.replace(ns.raw_out)
        return 0
    diagnosis = diagnose_links(records, world)
    if ns.json_path == "-":
        print(json.dumps(diagnosis.to_dict(), indent=2))
    else:
        print(format_report(diagnosis))
        if ns.json_path:
            Path(ns.json_path).write_text(json.dumps(diagnosis.to_dict(), indent=2))
    if ns.heatmap:
        write_heatmap(diagnosis, Path(ns.heatmap))
    return 1 if diagnosis.faults else 0


if __name__ == "__main__":
    sys.exit(main())
