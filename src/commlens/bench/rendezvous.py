"""The launcher's rendezvous store, bound to one address: loopback for a local run.

torch's own rendezvous stores (``c10d``, ``static``) listen on every interface with no authentication, so a
plain local run would accept connections from any host that can reach this one. ``commlens bench``
registers the ``commlens-bound`` rendezvous instead: torch's static one-node rendezvous whose TCPStore is
served from a socket commlens binds itself (``127.0.0.1`` for a local run, the emulated cluster's bridge
address with ``--cluster``). The workers reuse that store (``use_agent_store``), so the launcher opens no
other listener; gloo's own listeners follow ``GLOO_SOCKET_IFNAME`` (``lo`` for a local run).
"""

from __future__ import annotations

import datetime as dt
import socket
from typing import Any

__all__ = ["BACKEND", "LOOPBACK", "bound_listener", "group_store", "register"]

BACKEND = "commlens-bound"
LOOPBACK = "127.0.0.1"


def bound_listener(host: str, port: int = 0) -> socket.socket:
    """A listening TCP socket on ``host`` only (port 0: any free port); raises OSError if it cannot bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    return sock


def _create_handler(params: Any) -> Any:
    from torch._C._distributed_c10d import PrefixStore, TCPStore  # (what torch.distributed re-exports)
    from torch.distributed.elastic.rendezvous.api import RendezvousInfo, RendezvousStoreInfo
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous

    class BoundRendezvous(StaticTCPRendezvous):
        """One node, the store served from a socket bound to ``master_addr`` only."""

        def get_backend(self) -> str:
            return BACKEND

        def next_rendezvous(self) -> RendezvousInfo:
            if self._store is None:
                sock = bound_listener(self.master_addr, self.master_port)
                self.master_port = sock.getsockname()[1]
                self._store = TCPStore(
                    self.master_addr,
                    self.master_port,
                    self.world_size,
                    True,
                    self.timeout,
                    multi_tenant=True,
                    master_listen_fd=sock.detach(),
                )
            return RendezvousInfo(
                PrefixStore(self.run_id, self._store),
                0,
                self.world_size,
                RendezvousStoreInfo(self.master_addr, self.master_port),
            )

    host, _, port = params.endpoint.rpartition(":")
    timeout_s = int(params.config.get("timeout", 600))
    return BoundRendezvous(host.strip("[]"), int(port), 0, params.max_nodes, params.run_id, timeout_s)


def register() -> None:
    """Make ``rdzv_backend="commlens-bound"`` (endpoint ``HOST:PORT``, port 0 for any) known to torch."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    rendezvous_handler_registry.register(BACKEND, _create_handler)


def group_store(timeout_s: float) -> tuple[Any, int, int] | None:
    """(store, rank, world size) for ``init_process_group(store=...)`` when the ranks host their own store
    (``MASTER_ADDR``/``MASTER_PORT`` set, no launcher agent's store): rank 0 serves it on ``MASTER_ADDR`` only,
    not on every interface as ``env://`` would; the others connect to it. None under a launcher's agent
    store (``torchrun``), where ``env://`` applies unchanged."""
    import os

    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or "MASTER_ADDR" not in env:
        return None
    from torch._C._distributed_c10d import TCPStore  # (what torch.distributed re-exports)

    host, port = env["MASTER_ADDR"], int(env.get("MASTER_PORT", "29500"))
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    timeout = dt.timedelta(seconds=timeout_s)
    if rank != 0:
        return TCPStore(host, port, world, False, timeout), rank, world
    sock = bound_listener(host, port)
    return TCPStore(host, port, world, True, timeout, master_listen_fd=sock.detach()), rank, world
