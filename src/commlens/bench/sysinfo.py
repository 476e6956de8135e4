"""What a rank knows about the machine it runs on, gathered into a SystemInfo."""

from __future__ import annotations

import os
import platform
import socket
from typing import TypedDict

from commlens import __version__
from commlens.results.records import SystemInfo

__all__ = ["LocalFacts", "local_facts", "system_info", "ENV_PREFIXES"]

ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "UCX_", "FI_")


class LocalFacts(TypedDict):
    """One rank's facts, as :func:`local_facts` gathers them (a plain dict: it crosses ``all_gather_object``)."""

    host: str
    machine: str
    pid: int
    device_name: str
    cpu_model: str
    cpu_cores: int
    env: dict[str, str]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fp:
            for line in fp:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def local_facts(device: str, local_rank: int) -> LocalFacts:
    """This rank's host, device and environment (plain data, ready to gather).

    ``machine`` is the real host (ranks on one machine share its clock); ``host`` is the host the rank runs
    on as the job sees it: the machine, or on an emulated cluster (``commlens.cluster.place`` sets
    ``COMMLENS_CLUSTER_HOST``) the emulated host, ``MACHINE/hK``.
    """
    import torch

    device_name = "cpu"
    if device == "cuda" and torch.cuda.is_available():
        device_name = torch.cuda.get_device_name(local_rank % max(1, torch.cuda.device_count()))
    machine = socket.gethostname()
    emulated = os.environ.get("COMMLENS_CLUSTER_HOST")
    return {
        "host": f"{machine}/h{emulated}" if emulated else machine,
        "machine": machine,
        "pid": os.getpid(),
        "device_name": device_name,
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count() or 0,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
    }


def _backend_version(backend: str) -> str:
    import torch

    if backend == "nccl" and torch.cuda.is_available():
        try:
            return ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - NCCL may be absent from a CPU build
            return ""
    if backend == "gloo":
        return f"torch-{torch.__version__}"
    return ""


def system_info(world_size: int, backend: str, device: str, facts: list[LocalFacts]) -> SystemInfo:
    """Combine every rank's facts (index = rank) into the run's system record."""
    import torch

    hosts = [f["host"] for f in facts]
    ranks_per_host: dict[str, int] = {}
    for h in hosts:
        ranks_per_host[h] = ranks_per_host.get(h, 0) + 1
    first = facts[0]
    return SystemInfo(
        world_size=world_size,
        hosts=tuple(dict.fromkeys(hosts)),
        ranks_per_host=ranks_per_host,
        backend=backend,
        backend_version=_backend_version(backend),
        device=device,
        device_names=tuple(f["device_name"] for f in facts),
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        cpu_model=first["cpu_model"],
        cpu_cores=first["cpu_cores"],
        os=f"{platform.system()} {platform.release()}",
        commlens_version=__version__,
        env=first["env"],
        extra={"rank_hosts": hosts, "rank_pids": [f["pid"] for f in facts]},
    )
