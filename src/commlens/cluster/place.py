"""Place one rank on an emulated host: ``python -m commlens.cluster.place --cluster NAME -- -m MODULE ARGS``.

Used as the per-rank entry point under torch's elastic launcher (``commlens bench --cluster``) and by
``commlens diagnose links --cluster``. It picks the host (``--host``, or ``LOCAL_RANK // ranks-per-host``),
joins the host's CPU cgroup when that host is CPU-starved, sets ``GLOO_SOCKET_IFNAME`` to the host's
interface and ``MASTER_ADDR`` to the bridge address (where the launcher's store listens, reachable from
every namespace), then ``exec``s Python inside the namespace via ``ip netns exec``: the process id stays
the same, so the launcher's signals and exit codes reach the rank unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys

from commlens.cluster.kernel import cgroup_dir
from commlens.cluster.lifecycle import IFNAME
from commlens.cluster.spec import ClusterError, names_for
from commlens.cluster.state import load_state

__all__ = ["main", "place_command"]


def place_command(name: str, host: int, python_args: list[str], master_addr: str = "bridge") -> list[str]:
    """The argv that runs ``python python_args`` as a rank on ``host`` of cluster ``name``."""
    return [
        sys.executable,
        "-m",
        "commlens.cluster.place",
        "--cluster",
        name,
        "--host",
        str(host),
        "--master-addr",
        master_addr,
        "--",
        *python_args,
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m commlens.cluster.place")
    p.add_argument("--cluster", required=True)
    p.add_argument("--host", type=int, default=None, help="host number (default: LOCAL_RANK // --ranks-per-host)")
    p.add_argument("--ranks-per-host", type=int, default=None, help="default: the cluster's")
    p.add_argument("--master-addr", default="bridge", help="'bridge', 'keep' (leave MASTER_ADDR) or an address")
    p.add_argument("python_args", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    args = ns.python_args[1:] if ns.python_args[:1] == ["--"] else ns.python_args
    try:
        state = load_state(ns.cluster)
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    ranks_per_host = ns.ranks_per_host or state.spec.ranks_per_host
    host = ns.host if ns.host is not None else int(os.environ.get("LOCAL_RANK", "0")) // ranks_per_host
    if not 0 <= host < state.spec.hosts:
        print(
            f"error: rank placed on host {host}, but cluster {ns.cluster!r} has {state.spec.hosts} hosts",
            file=sys.stderr,
        )
        raise SystemExit(2)
    names = names_for(state.spec.name)
    if any(f.host == host for f in state.spec.starved_hosts):
        (cgroup_dir(names.cgroup(host)) / "cgroup.procs").write_text(str(os.getpid()))
    os.environ["GLOO_SOCKET_IFNAME"] = IFNAME
    os.environ["COMMLENS_CLUSTER_HOST"] = str(host)
    if ns.master_addr == "bridge":
        os.environ["MASTER_ADDR"] = state.bridge_address
    elif ns.master_addr != "keep":
        os.environ["MASTER_ADDR"] = ns.master_addr
    os.execvp("ip", ["ip", "netns", "exec", names.netns(host), sys.executable, *args])


if __name__ == "__main__":
    main()
