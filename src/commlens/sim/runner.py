"""Run a simulation: :class:`SimConfig` (collectives of one job or several, one fabric, :class:`SimOptions`) in,
:class:`SimResult` out (:func:`run`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from commlens.model import predict
from commlens.ops import OPS, get_op
from commlens.sim.budget import CollectiveShape, check_sim_size
from commlens.sim.engine import Engine
from commlens.sim.fabric import Fabric, FabricDoc, SimError, build_fabric
from commlens.sim.options import SimOptions
from commlens.sim.traffic import Collective, plan
from commlens.topology import Topology

__all__ = ["CollectiveResult", "SimConfig", "SimResult", "run", "simulate"]


@dataclass(frozen=True)
class CollectiveResult:
    """One collective across all its groups: when it ran, how long the slowest group took, its busBW."""

    name: str
    op: str
    algo: str
    size_bytes: float
    groups: int
    ranks: int
    start_s: float
    end_s: float
    time_s: float  # the slowest group, from its start to its end
    analytic_s: float  # the cost model's time for one group alone on the fabric
    busbw_bytes_per_s: float
    stages: list[dict[str, float | str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "op": self.op,
            "algo": self.algo,
            "size_bytes": self.size_bytes,
            "groups": self.groups,
            "ranks": self.ranks,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "time_s": self.time_s,
            "analytic_s": self.analytic_s,
            "slowdown": self.time_s / self.analytic_s if self.analytic_s > 0 else 1.0,
            "busbw_bytes_per_s": self.busbw_bytes_per_s,
            "stages": self.stages,
        }


@dataclass(frozen=True)
class SimResult:
    """A whole simulation: its collectives, the fabric, the links' load, and how much work it took."""

    topology: str
    routing: str
    seed: int
    sync: bool
    makespan_s: float
    collectives: list[CollectiveResult]
    fabric: FabricDoc
    hottest: list[dict[str, object]]
    classes: list[dict[str, object]]
    timeline: dict[str, object]
    events: int
    recomputations: int
    wall_s: float
    qps: int = 1
    channels: int = 2
    link_util: np.ndarray | None = field(default=None, compare=False)  # each link's mean utilisation (not in JSON)
    graph: Fabric | None = field(default=None, compare=False)  # the fabric simulated, faults applied (not in JSON)

    def as_dict(self) -> dict[str, object]:
        return {
            "format": "commlens.sim/1",
            "topology": self.topology,
            "routing": self.routing,
            "seed": self.seed,
            "sync": self.sync,
            "qps": self.qps,
            "channels": self.channels,
            "makespan_s": self.makespan_s,
            "collectives": [c.as_dict() for c in self.collectives],
            "fabric": self.fabric,
            "hottest_links": self.hottest,
            "link_classes": self.classes,
            "timeline": self.timeline,
            "events": self.events,
            "rate_recomputations": self.recomputations,
            "wall_s": self.wall_s,
        }


@dataclass(frozen=True)
class SimConfig:
    """What one simulation takes: ``collectives`` together on the fabric of ``nodes`` nodes of ``topology``, run
    with ``options``. Checked when built (:class:`SimError` naming the field)."""

    topology: Topology
    nodes: int  # nodes of the job (all jobs together)
    collectives: tuple[Collective, ...]
    options: SimOptions = SimOptions()
    sync: bool = True  # the flows of a stage wait for the slowest (NCCL's steps), else each flow runs on its own
    top: int = 10  # hottest links to report
    fabric: Fabric | None = field(default=None, compare=False)  # the fabric already built for topology and nodes

    def __post_init__(self) -> None:
        if not isinstance(self.topology, Topology):
            raise SimError(f"topology: must be a Topology, got {type(self.topology).__name__}")
        if not isinstance(self.collectives, tuple) or not all(isinstance(c, Collective) for c in self.collectives):
            raise SimError("collectives: must be a tuple of Collective")
        if not self.collectives:
            raise SimError("nothing to simulate: no collective given")
        if not isinstance(self.options, SimOptions):
            raise SimError(f"options: must be SimOptions, got {type(self.options).__name__}")
        for name in ("nodes", "top"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SimError(f"{name}: must be a whole number >= 1, got {value!r}")


def run(config: SimConfig) -> SimResult:
    """Simulate ``config.collectives`` together on the fabric of ``config.nodes`` nodes of its topology.

    Each collective starts at once, or after the collectives it names in ``after`` end (group by group where
    both have as many groups, else after all of them), plus its ``delay_s``. ``options.channels``: NCCL's channels
    between each pair of ranks, each its own connection (NCCL duplicates the channels its topology search finds,
    so a ring over 8-NIC nodes runs 2 per NIC: NVIDIA/nccl#578, #1302); ``options.qps``: queue pairs each
    connection is split over (NCCL_IB_QPS_PER_CONNECTION). ECMP hashes each of the ``channels x qps`` flows on its
    own.
    """
    topology, nodes, collectives, opts = config.topology, config.nodes, config.collectives, config.options
    shapes = []
    for coll in collectives:
        rows, ranks = np.shape(coll.groups) if np.ndim(coll.groups) == 2 else (1, 0)
        shapes.append(CollectiveShape(coll.op, coll.size_bytes, int(rows), int(ranks), coll.algo))
    check_sim_size(topology, nodes, shapes, qps=opts.qps, channels=opts.channels)
    wall0 = time.perf_counter()
    fab = config.fabric if config.fabric is not None else build_fabric(topology, nodes)
    fab = fab.with_faults(opts.faults)
    engine = Engine(fab.capacity, fab.link_class, len(fab.class_names))
    planned = _plan_all(
        engine, fab, collectives, routing=opts.routing, seed=opts.seed, sync=config.sync, qps=opts.qps * opts.channels
    )
    makespan = engine.run()
    results = [_collective_result(engine, topology, fab, coll, planned[coll.name]) for coll in collectives]
    util, hottest, classes, timeline = _link_use(engine, fab, makespan, config.top)
    return SimResult(
        topology.name,
        opts.routing,
        opts.seed,
        config.sync,
        makespan,
        results,
        fab.describe(),
        hottest,
        classes,
        timeline,
        engine.events,
        engine.recomputations,
        time.perf_counter() - wall0,
        opts.qps,
        opts.channels,
        util,
        fab,
    )


def simulate(
    topology: Topology,
    nodes: int,
    collectives: Sequence[Collective],
    *,
    options: SimOptions | None = None,
    fabric: Fabric | None = None,
) -> SimResult:
    """Shorthand for :func:`run` of a :class:`SimConfig` (default options, sync, top 10), kept for the
    projection's simulated network (:mod:`commlens.project.simnet`)."""
    opts = options if options is not None else SimOptions()
    return run(SimConfig(topology, nodes, tuple(collectives), opts, fabric=fabric))


_Planned = tuple[str, list[list[int]], list[tuple[str, float, list[int]]]]  # algorithm, task ids per group, stages


def _plan_all(
    engine: Engine, fab: Fabric, collectives: Sequence[Collective], *, routing: str, seed: int, sync: bool, qps: int
) -> dict[str, _Planned]:
    """Each collective's flows added to ``engine``, after the collectives it names; ``qps``: flows per connection."""
    planned: dict[str, _Planned] = {}
    for coll in collectives:
        if coll.name in planned:
            raise SimError(f"two collectives are named {coll.name!r}")
        deps = None
        groups = np.asarray(coll.groups)
        if coll.after:
            for name in coll.after:
                if name not in planned:
                    raise SimError(f"{coll.name}: runs after {name!r}, which is not defined before it")
            per = [planned[n][1] for n in coll.after]
            if all(len(ids) == groups.shape[0] for ids in per):
                deps = [[ids[g][-1] for ids in per] for g in range(groups.shape[0])]
            else:
                last = [i[-1] for ids in per for i in ids]
                deps = [list(last) for _ in range(groups.shape[0])]
        planned[coll.name] = plan(engine, fab, coll, routing=routing, seed=seed, sync=sync, deps=deps, qps=qps)
    return planned


def _collective_result(
    engine: Engine, topology: Topology, fab: Fabric, coll: Collective, planned: _Planned
) -> CollectiveResult:
    """One collective's times (its slowest group's), its stages' and the analytic model's."""
    algo, ids, stages = planned
    op = coll.op if coll.op in OPS else get_op(coll.op).name
    per_group = [(engine.tasks[g[0]].start_s, engine.tasks[g[-1]].end_s) for g in ids]
    start = min(s for s, _ in per_group)
    end = max(e for _, e in per_group)
    slowest = max(e - s for s, e in per_group)
    p = int(np.asarray(coll.groups).shape[1])
    analytic = _analytic(topology, fab, coll, op, algo) if p > 1 else 0.0
    t_coll = slowest - coll.delay_s
    stage_rows: list[dict[str, float | str]] = []
    for s_name, s_analytic, tids in stages:
        if not tids:
            continue
        t0 = min(engine.tasks[i].start_s for i in tids)
        t1 = max(engine.tasks[i].end_s for i in tids)
        stage_rows.append({"stage": s_name, "start_s": t0, "end_s": t1, "time_s": t1 - t0, "analytic_s": s_analytic})
    busbw = OPS[op].busbw(int(coll.size_bytes), t_coll, p) if t_coll > 0 else 0.0
    return CollectiveResult(
        coll.name, op, algo, coll.size_bytes, len(ids), p, start, end, t_coll, analytic, busbw, stage_rows
    )


def _link_use(
    engine: Engine, fab: Fabric, makespan: float, top: int
) -> tuple[np.ndarray, list[dict[str, object]], list[dict[str, object]], dict[str, object]]:
    """Each link's mean utilisation over the makespan, the ``top`` hottest links, per class, and the timeline."""
    span = max(makespan, 1e-30)
    util = engine.link_bytes / (fab.capacity.clip(min=1e-30) * span)
    util[fab.capacity <= 0] = 0.0
    order = np.argsort(-util, kind="stable")[:top]
    hottest = [
        {"link": fab.link_name(int(i)), "utilisation": float(util[i]), "bytes": float(engine.link_bytes[i])}
        for i in order
        if util[i] > 0
    ]
    classes = []
    for c, name in enumerate(fab.class_names):
        sel = fab.link_class == c
        if sel.any():
            u = util[sel]
            classes.append(
                {
                    "class": name,
                    "links": int(sel.sum()),
                    "mean_utilisation": float(u.mean()),
                    "max_utilisation": float(u.max()),
                }
            )
    timeline = {
        "classes": list(fab.class_names),
        "t0_s": [seg[0] for seg in engine.timeline],
        "t1_s": [seg[1] for seg in engine.timeline],
        "mean_utilisation": [seg[2].round(6).tolist() for seg in engine.timeline],
        "max_utilisation": [seg[3].round(6).tolist() for seg in engine.timeline],
    }
    return util, hottest, classes, timeline


def _analytic(topology: Topology, fab: Fabric, coll: Collective, op: str, algo: str) -> float:
    group = np.asarray(coll.groups)[0]
    nodes = int(np.unique(group // fab.gpus_per_node).size)
    return predict(
        topology, op, int(coll.size_bytes), nodes=nodes, ranks_per_host=group.size // nodes, algo=algo
    ).time_s
