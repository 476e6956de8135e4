"""The projection's communication terms from the simulator (``commlens project --network sim``).

Each term of a step (a TP all-reduce, the DP reduce-scatter, the EP all-to-all, a PP send/recv) is one collective
run by every group of its dimension at once, placed on the GPUs as the layout places them
(:attr:`commlens.project.layout.Resolved.placement`), on the fabric of the whole job: so DP rings that share leaf
uplinks, ECMP collisions, oversubscribed tiers and failed links all show in the term. PP send/recv runs every
stage boundary of every pipeline at once, both ways (1F1B's steady state). Results are cached per term.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from commlens.model import InfeasibleError, predict
from commlens.model.backends import DEVICE_A2A_OPS, nccl_predict
from commlens.project.errors import InfeasibleLayoutError
from commlens.project.layout import Group, Resolved
from commlens.sim import Collective, Fabric, SimError, SimOptions, build_fabric, groups_by_stride, simulate
from commlens.topology import Topology

__all__ = ["SimNetwork"]

_FABRICS: dict[tuple, Fabric] = {}
_TIMES: dict[tuple, float] = {}


class SimNetwork:
    """Collective times of one resolved layout on one topology, simulated with all groups of a dimension."""

    def __init__(self, topology: Topology, r: Resolved, gpus: int, options: SimOptions, nvls: bool = True) -> None:
        self.topology = topology
        self.nvls = nvls  # NCCL_NVLS_ENABLE as the run set it (step.nccl_nvls) [27 s16 nvls]
        self.r = r
        self.gpus = gpus
        self.faults = options.faults
        self._run = replace(options, faults=())  # the cached fabric (_fabric) has the faults applied already
        per_node = topology.accelerators_per_node
        self.nodes = max(1, -(-gpus // per_node))
        self._key = (
            id(topology),
            gpus,
            tuple(sorted(r.placement.items())),
            options,
            nvls,
        )

    def _fabric(self) -> Fabric:
        key = (id(self.topology), self.nodes, self.faults)
        fab = _FABRICS.get(key)
        if fab is None:
            if len(_FABRICS) > 8:
                _FABRICS.clear()
            try:
                fab = build_fabric(self.topology, self.nodes).with_faults(self.faults)
            except SimError as e:
                raise InfeasibleLayoutError(str(e), "topology") from None
            _FABRICS[key] = fab
        return fab

    def _dim(self, group: Group) -> str:
        for dim, g in self.r.groups.items():
            if g is group:
                return dim
        return "pp"  # the send/recv pair the step builds for a stage boundary

    def _groups(self, dim: str) -> np.ndarray:
        size, stride = self.r.placement[dim]
        groups = groups_by_stride(self.gpus, size, stride)
        if dim == "pp":  # every stage boundary of every pipeline
            return np.concatenate([groups[:, [s, s + 1]] for s in range(size - 1)])
        return groups

    def time_s(self, op: str, size_bytes: float, group: Group) -> float:
        if group.size == 1 or size_bytes <= 0:
            return 0.0
        dim = self._dim(group)
        key = (*self._key, op, int(size_bytes), dim)
        hit = _TIMES.get(key)
        if hit is not None:
            return hit
        if len(_TIMES) > 100_000:
            _TIMES.clear()
        try:
            # NCCL's algorithm for the flows; its protocol's own latency and bandwidth share (LL, LL128) are no
            # network effect, so they are added as they cost the analytic model
            nccl = nccl_predict(
                self.topology,
                op,
                int(size_bytes),
                nodes=group.nodes,
                ranks_per_host=group.ranks_per_host,
                nvls=self.nvls,
            )
            flows = "all_to_all" if op in DEVICE_A2A_OPS else op  # the GPUs' own all-to-all: the same flows
            plain = predict(
                self.topology,
                flows,
                int(size_bytes),
                nodes=group.nodes,
                ranks_per_host=group.ranks_per_host,
                algo=nccl.algo,
            )
            result = simulate(
                self.topology,
                self.nodes,
                [Collective(dim, flows, float(int(size_bytes)), self._groups(dim), algo=nccl.algo)],
                options=self._run,
                fabric=self._fabric(),
            )
        except (SimError, InfeasibleError) as e:
            raise InfeasibleLayoutError(f"{op} over {group.size} ranks ({dim}): {e}", "topology") from None
        hit = result.collectives[0].time_s + max(0.0, nccl.time_s - plain.time_s)
        _TIMES[key] = hit
        return hit
