"""The cluster's state on disk: one versioned JSON file per cluster, written before each kernel object is made.

Because the registry of created objects is saved *before* each object is created, ``down`` can remove a
cluster whose ``up`` was killed midway (even by SIGKILL), not only one that finished.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict, TypeVar

from commlens.cluster.spec import (
    ClusterError,
    ClusterSpec,
    SlowHost,
    SlowLink,
    StarvedHost,
    check_name,
)

__all__ = ["FORMAT", "ClusterDoc", "ClusterState", "list_states", "load_state", "state_dir", "state_path"]

FORMAT = "commlens.cluster/1"
_T = TypeVar("_T")


class FaultsDoc(TypedDict):
    """The cluster's faults as the state file keeps them (each one its dataclass's fields)."""

    slow_hosts: list[dict[str, object]]
    slow_links: list[dict[str, object]]
    starved_hosts: list[dict[str, object]]


class ClusterDoc(TypedDict):
    """One cluster's state file (``commlens.cluster/1``), also what ``cluster status --json`` starts from."""

    format: str
    name: str
    status: str  # building | up
    hosts: int
    link_bytes_per_s: float
    ranks_per_host: int
    subnet: str
    subnet_index: int
    bridge_address: str
    addresses: list[str]
    faults: FaultsDoc
    created: list[dict[str, str]]  # the kernel objects made, in order: kind and name


def _field(d: Mapping[str, object], key: str, kind: type[_T]) -> _T:
    """``d[key]`` when it is a ``kind``; ClusterError (the state file is unreadable) otherwise."""
    value = d[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ClusterError(f"{key}: expected {kind.__name__}, got {value!r}")
    return value


def _records(faults: Mapping[str, object], key: str) -> list[dict[str, object]]:
    items = _field(faults, key, list)
    if not all(isinstance(x, dict) for x in items):
        raise ClusterError(f"faults.{key}: expected a list of objects")
    return items


def state_dir() -> Path:
    """``$COMMLENS_CLUSTER_DIR`` or ``/run/commlens/clusters`` (tmpfs: gone after a reboot, as the namespaces)."""
    return Path(os.environ.get("COMMLENS_CLUSTER_DIR", "/run/commlens/clusters"))


def state_path(name: str) -> Path:
    """The state file of cluster ``name``; ClusterError for a name ``up`` would refuse (``../x``), before any
    path is built from it."""
    try:
        check_name(name)
    except ValueError as e:
        raise ClusterError(f"cluster {e}") from None
    return state_dir() / f"{name}.json"


@dataclass
class ClusterState:
    """A cluster as built: its spec, addresses and the kernel objects it owns, in creation order."""

    spec: ClusterSpec
    subnet_index: int
    status: str = "building"  # building | up
    created: list[dict[str, str]] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return f"10.213.{self.subnet_index}"

    def host_address(self, host: int) -> str:
        return f"{self.prefix}.{host + 1}"

    @property
    def bridge_address(self) -> str:
        return f"{self.prefix}.254"

    @property
    def path(self) -> Path:
        return state_path(self.spec.name)

    def to_dict(self) -> ClusterDoc:
        s = self.spec
        return {
            "format": FORMAT,
            "name": s.name,
            "status": self.status,
            "hosts": s.hosts,
            "link_bytes_per_s": s.link_bytes_per_s,
            "ranks_per_host": s.ranks_per_host,
            "subnet": f"{self.prefix}.0/24",
            "subnet_index": self.subnet_index,
            "bridge_address": self.bridge_address,
            "addresses": [self.host_address(h) for h in range(s.hosts)],
            "faults": {
                "slow_hosts": [asdict(f) for f in s.slow_hosts],
                "slow_links": [asdict(f) for f in s.slow_links],
                "starved_hosts": [asdict(f) for f in s.starved_hosts],
            },
            "created": self.created,
        }

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2))
        tmp.replace(self.path)

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ClusterState:
        """The state :meth:`to_dict` wrote; ClusterError naming a field of the wrong type, KeyError a missing one
        (and the spec's own errors for values out of range)."""
        if d.get("format") != FORMAT:
            raise ClusterError(f"cluster state has format {d.get('format')!r}, expected {FORMAT}")
        f = _field(d, "faults", dict)
        spec = ClusterSpec(
            name=_field(d, "name", str),
            hosts=_field(d, "hosts", int),
            link_bytes_per_s=_field(d, "link_bytes_per_s", float),
            ranks_per_host=_field(d, "ranks_per_host", int),
            slow_hosts=tuple(
                SlowHost(_field(x, "host", int), _field(x, "fraction", float)) for x in _records(f, "slow_hosts")
            ),
            slow_links=tuple(
                SlowLink(_field(x, "a", int), _field(x, "b", int), _field(x, "fraction", float))
                for x in _records(f, "slow_links")
            ),
            starved_hosts=tuple(
                StarvedHost(_field(x, "host", int), _field(x, "cpu_fraction", float))
                for x in _records(f, "starved_hosts")
            ),
        )
        created = _field(d, "created", list)
        return cls(
            spec=spec, subnet_index=_field(d, "subnet_index", int), status=_field(d, "status", str), created=created
        )


def load_state(name: str) -> ClusterState:
    """The saved state of cluster ``name``; ClusterError when there is none."""
    path = state_path(name)
    try:
        return ClusterState.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ClusterError(f"no cluster named {name!r} (start one with `commlens cluster up --name {name}`)") from None
    except OSError as e:
        raise ClusterError(f"cluster state {path} cannot be read: {e.strerror}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ClusterError(f"cluster state {path} is unreadable: {e}") from None


def _is_name(stem: str) -> bool:
    try:
        check_name(stem)
    except ValueError:
        return False
    return True


def list_states() -> list[ClusterState]:
    """Every saved cluster (files whose names no cluster can have are not clusters: left alone)."""
    d = state_dir()
    return [load_state(p.stem) for p in sorted(d.glob("*.json")) if _is_name(p.stem)] if d.exists() else []
