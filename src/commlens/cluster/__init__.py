"""The emulated multi-host cluster: hosts as Linux network namespaces on a bridge, links shaped with HTB.

Imports nothing of commlens outside this package. ``up``/``down``/``change``/``status`` manage a cluster;
its state is a JSON file (``state.state_dir()``) that ``commlens bench --cluster`` and
``commlens diagnose links --cluster`` read; ``commlens.cluster.place`` (run as a module) puts a rank on a host.
"""

from __future__ import annotations

from commlens.cluster.lifecycle import change, down, leftovers, require_root, status, up
from commlens.cluster.spec import (
    ClusterError,
    ClusterSpec,
    NotRootError,
    SlowHost,
    SlowLink,
    StarvedHost,
    parse_slow_host,
    parse_slow_link,
    parse_starved_host,
)
from commlens.cluster.state import ClusterState, list_states, load_state

__all__ = [
    "ClusterError",
    "ClusterSpec",
    "ClusterState",
    "NotRootError",
    "SlowHost",
    "SlowLink",
    "StarvedHost",
    "change",
    "down",
    "leftovers",
    "list_states",
    "load_state",
    "parse_slow_host",
    "parse_slow_link",
    "parse_starved_host",
    "require_root",
    "status",
    "up",
]
