"""Build, shape, change and remove an emulated cluster: hosts as network namespaces on one bridge.

Layout of cluster NAME with N hosts on subnet 10.213.X.0/24 (X picked free at ``up``)::

    root namespace:  bridge clTAGbr (10.213.X.254) ── veth clTAGhK ─┐
    namespace cl-NAME-hK:                         eth0 (10.213.X.K+1) ┘

Shaping, all HTB (netem is not available): host K's egress is an HTB on its ``eth0`` (default class at
the host's rate; one class per slow link, chosen by a u32 filter on the destination address); its
ingress is an HTB on the bridge-side veth's egress at the host's rate. A CPU-starved host's ranks are
placed in a CPU cgroup with a quota (see ``commlens.cluster.place``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any, TypedDict

from commlens.cluster.kernel import remove_cgroup, run, set_cpu_quota, try_run
from commlens.cluster.spec import ClusterError, ClusterSpec, NotRootError, names_for
from commlens.cluster.state import ClusterDoc, ClusterState, list_states, load_state, state_dir

__all__ = ["change", "down", "leftovers", "require_root", "status", "up"]

log = logging.getLogger(__name__)

IFNAME = "eth0"  # the host's interface inside its namespace


def require_root() -> None:
    if os.geteuid() != 0:
        raise NotRootError(
            "commlens cluster needs root: it creates network namespaces, veth pairs, a bridge and "
            "tc qdiscs (run it with sudo)"
        )


def _free_subnet_index(name: str) -> int:
    used = {s.subnet_index for s in list_states() if s.spec.name != name}
    routes = run("ip", "-4", "route", "show")
    for index in range(1, 255):
        if index not in used and f"10.213.{index}." not in routes:
            return index
    raise ClusterError("no free 10.213.X.0/24 subnet left for another cluster")


def _bits(rate_bytes_per_s: float) -> str:
    return f"{int(rate_bytes_per_s * 8)}bit"


def _burst(rate_bytes_per_s: float) -> str:
    return f"{max(16_000, int(rate_bytes_per_s / 1000))}b"  # about 1 ms of traffic


def _htb(prefix: list[str], dev: str, rate: float, classes: dict[int, tuple[float, str | None]]) -> None:
    """(Re)build the HTB root on ``dev``: default class 1:10 at ``rate``, plus ``classes``: id -> (rate, dst ip)."""
    try_run(*prefix, "qdisc", "del", "dev", dev, "root")
    run(*prefix, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
    top = max([rate, *(r for r, _ in classes.values())])
    _htb_class(prefix, dev, "1:", "1:1", top)
    for cid, (r, dst) in {10: (rate, None), **classes}.items():
        _htb_class(prefix, dev, "1:1", f"1:{cid}", r)
        if dst is not None:
            run(
                *prefix,
                "filter",
                "add",
                "dev",
                dev,
                "parent",
                "1:",
                "protocol",
                "ip",
                "prio",
                "1",
                "u32",
                "match",
                "ip",
                "dst",
                f"{dst}/32",
                "flowid",
                f"1:{cid}",
            )


def _htb_class(prefix: list[str], dev: str, parent: str, classid: str, rate: float) -> None:
    """An HTB class ``classid`` under ``parent`` on ``dev``, rate and ceiling ``rate`` bytes/s."""
    bits, burst = _bits(rate), _burst(rate)
    run(
        *prefix,
        "class",
        "add",
        "dev",
        dev,
        "parent",
        parent,
        "classid",
        classid,
        "htb",
        "rate",
        bits,
        "ceil",
        bits,
        "burst",
        burst,
        "cburst",
        burst,
    )


def apply_shaping(state: ClusterState) -> None:
    """Set every host's egress and ingress shaping from the spec (idempotent; used by ``up`` and ``change``)."""
    spec, names = state.spec, names_for(state.spec.name)
    for h in range(spec.hosts):
        rate = spec.host_rate(h)
        classes: dict[int, tuple[float, str | None]] = {}
        for peer in range(spec.hosts):
            cap = spec.link_rate(h, peer) if peer != h else None
            if cap is not None:
                classes[100 + peer] = (min(cap, rate), state.host_address(peer))
        _htb(["tc", "-n", names.netns(h)], IFNAME, rate, classes)
        _htb(["tc"], names.veth_root(h), rate, {})
    for f in spec.starved_hosts:
        path = set_cpu_quota(names.cgroup(f.host), f.cpu_fraction)
        if not any(c["kind"] == "cgroup" and c["name"] == str(path) for c in state.created):
            state.created.append({"kind": "cgroup", "name": str(path)})
            state.save()


def _create(state: ClusterState, kind: str, name: str, *argv: str) -> None:
    """Record the object, then make it: a crash between the two leaves a record of nothing, which down skips.

    When making it fails (say the name is taken by something else), the record is dropped: what we did not
    make is not ours to remove.
    """
    state.created.append({"kind": kind, "name": name})
    state.save()
    try:
        run(*argv)
    except ClusterError:
        state.created.pop()
        state.save()
        raise


def up(spec: ClusterSpec) -> ClusterState:
    """Build the cluster; on any failure (an exception, Ctrl-C) remove everything made so far and re-raise."""
    require_root()
    if (state_dir() / f"{spec.name}.json").exists():
        raise ClusterError(f"cluster {spec.name!r} already exists (remove it with `commlens cluster down {spec.name}`)")
    names = names_for(spec.name)
    state = ClusterState(spec=spec, subnet_index=_free_subnet_index(spec.name))
    state.save()
    try:
        _create(state, "bridge", names.bridge, "ip", "link", "add", names.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{state.bridge_address}/24", "dev", names.bridge)
        run("ip", "link", "set", names.bridge, "up")
        for h in range(spec.hosts):
            ns = names.netns(h)
            _create(state, "netns", ns, "ip", "netns", "add", ns)
            _create(
                state,
                "link",
                names.veth_root(h),
                "ip",
                "link",
                "add",
                names.veth_root(h),
                "type",
                "veth",
                "peer",
                "name",
                IFNAME,
                "netns",
                ns,
            )
            run("ip", "link", "set", names.veth_root(h), "master", names.bridge, "up")
            run("ip", "-n", ns, "addr", "add", f"{state.host_address(h)}/24", "dev", IFNAME)
            run("ip", "-n", ns, "link", "set", IFNAME, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        apply_shaping(state)
        state.status = "up"
        state.save()
        return state
    except BaseException:
        _remove(state)
        raise


def _remove(state: ClusterState) -> list[str]:
    """Undo ``state.created`` in reverse order; returns the errors (objects already gone are not errors)."""
    errors = []
    for obj in reversed(state.created):
        kind, name = obj["kind"], obj["name"]
        try:
            if kind == "cgroup":
                remove_cgroup(name)
            elif kind == "netns":
                if name in run("ip", "netns", "list").split():
                    run("ip", "netns", "del", name)
            elif kind in ("link", "bridge"):
                if try_run("ip", "link", "show", "dev", name):
                    run("ip", "link", "del", name)
        except ClusterError as e:
            errors.append(str(e))
    if not errors:
        state.path.unlink(missing_ok=True)
    return errors


def down(name: str) -> None:
    """Remove cluster ``name`` entirely: cgroups, veths (with their qdiscs), namespaces, bridge, state file."""
    require_root()
    state = load_state(name)
    errors = _remove(state)
    if errors:
        raise ClusterError(f"cluster {name!r} not fully removed: " + "; ".join(errors))


def change(name: str, **updates: Any) -> ClusterState:
    """Change the link rate or faults of a running cluster; applies at once (ranks keep running).

    ``updates`` are ClusterSpec fields (``link_bytes_per_s``, ``slow_hosts``, ``slow_links``, ``starved_hosts``).
    Re-building each HTB takes a few milliseconds during which that device is unshaped.
    """
    require_root()
    state = load_state(name)
    state.spec = replace(state.spec, **updates)
    apply_shaping(state)
    state.save()
    return state


def leftovers(name: str) -> list[str]:
    """Kernel objects of cluster ``name`` that exist now (for ``status`` and for tests of the clean-up)."""
    names = names_for(name)
    found = [ns for ns in run("ip", "netns", "list").split() if ns.startswith(f"cl-{name}-h")]
    for line in run("ip", "-o", "link", "show").splitlines():
        dev = line.split(":")[1].strip().split("@")[0]
        if dev.startswith(f"cl{names.tag}"):
            found.append(dev)
    return found


class HostStatus(TypedDict, total=False):
    """One host of a cluster as the kernel has it (``tx_bytes`` only when its namespace exists)."""

    host: int
    netns: str
    address: str
    rate_bytes_per_s: float
    present: bool
    tx_bytes: int


class ClusterStatus(ClusterDoc):
    """The saved state, each host as the kernel has it, and whether all is there."""

    host_status: list[HostStatus]
    healthy: bool


def status(name: str) -> ClusterStatus:
    """The saved state plus what exists in the kernel and each host's shaped rates and bytes sent."""
    state = load_state(name)
    doc = state.to_dict()
    live = set(leftovers(name))
    names = names_for(name)
    hosts = []
    for h in range(state.spec.hosts):
        row: HostStatus = {
            "host": h,
            "netns": names.netns(h),
            "address": state.host_address(h),
            "rate_bytes_per_s": state.spec.host_rate(h),
            "present": names.netns(h) in live and names.veth_root(h) in live,
        }
        if row["present"]:
            row["tx_bytes"] = int(
                run(
                    "ip", "netns", "exec", names.netns(h), "cat", f"/sys/class/net/{IFNAME}/statistics/tx_bytes"
                ).strip()
            )
        hosts.append(row)
    return {**doc, "host_status": hosts, "healthy": all(r["present"] for r in hosts) and state.status == "up"}
