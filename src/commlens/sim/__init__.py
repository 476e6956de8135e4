"""Flow-level network simulation of collectives on real fabrics: contention, ECMP collisions, oversubscription,
failed links, concurrent parallel groups and jobs (``commlens sim``).

- :mod:`commlens.sim.fabric`: the fabric graph a topology spec describes, and faults on it;
- :mod:`commlens.sim.routing`: ECMP (seeded per-flow hash) and ideal spraying;
- :mod:`commlens.sim.traffic`: collectives as the cost model's own stages, replayed as flows;
- :mod:`commlens.sim.engine`: max-min fair rates by progressive filling, event by event;
- :mod:`commlens.sim.options`: :class:`SimOptions`, the simulator's options checked in one place;
- :mod:`commlens.sim.runner`: :func:`run` of a :class:`SimConfig`, and its :class:`SimResult`.
"""

from commlens.sim.budget import CollectiveShape, SimTooLargeError, check_sim_size, estimate_sim_bytes
from commlens.sim.engine import Engine, max_min_rates
from commlens.sim.fabric import Fabric, Fault, SimError, build_fabric, parse_fault
from commlens.sim.options import SimOptions
from commlens.sim.routing import ROUTINGS, route
from commlens.sim.runner import CollectiveResult, SimConfig, SimResult, run, simulate
from commlens.sim.traffic import Collective, groups_by_stride

__all__ = [
    "ROUTINGS",
    "Collective",
    "CollectiveResult",
    "CollectiveShape",
    "Engine",
    "Fabric",
    "Fault",
    "SimConfig",
    "SimError",
    "SimOptions",
    "SimResult",
    "SimTooLargeError",
    "build_fabric",
    "check_sim_size",
    "estimate_sim_bytes",
    "groups_by_stride",
    "max_min_rates",
    "parse_fault",
    "route",
    "run",
    "simulate",
]
