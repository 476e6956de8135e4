"""One whole training step simulated on the fabric, every parallel group at once (``commlens sim step``).

The projection (:func:`commlens.project.step.project`, analytic network) gives each pipeline stage's compute per
micro-batch; the step is then rebuilt as a DAG of collectives on the fabric of the whole job and simulated:

- each stage runs 1F1B (Megatron's order: ``pp - s - 1`` warm-up forwards, then one forward and one backward in
  turn, then the cool-down backwards); a forward is its compute (a third of the stage's, the backward two thirds)
  followed by its TP communication (all-gather and reduce-scatter of every layer's activations, with SP; or
  all-reduce), summed over the stage's layers into one collective of each kind;
- a forward's activations go to the next stage, a backward's gradients to the previous one (every pipeline's
  send at once), and the receiving stage's pass waits for them;
- after a stage's last backward its DP reduce-scatter (and parameter all-gather under ZeRO 1/2, all-reduce under
  ZeRO 0) starts, over the DP groups of that stage, while the other stages still compute and communicate.

Data-parallel replicas run in lockstep (each collective's groups are one task), so thousands of groups cost one
task per collective. The interleaved schedule is not rebuilt (virtual stages run as one); the step time is the
last stage's DP tail. The simulated step and its parts are compared with the projection's.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from commlens.project.layout import ParallelLayout, resolve
from commlens.project.memory import stage_parameters
from commlens.project.step import project
from commlens.sim import Collective, Fault, groups_by_stride, simulate
from commlens.topology import Topology
from commlens.workload import Workload

__all__ = ["simulate_step"]


def _schedule(pp: int, m: int, s: int) -> list[tuple[str, int]]:
    """1F1B order of stage ``s``: (pass, micro-batch)."""
    warm = min(pp - s - 1, m)
    ops = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while f < m:
        ops.append(("F", f))
        f += 1
        ops.append(("B", b))
        b += 1
    ops += [("B", i) for i in range(b, m)]
    return ops


def simulate_step(
    workload: Workload,
    topology: Topology,
    layout: ParallelLayout,
    gpus: int,
    *,
    routing: str = "ecmp",
    seed: int = 0,
    qps: int = 1,
    faults: tuple[Fault, ...] = (),
) -> dict[str, Any]:
    """Simulate one step; a JSON-ready document with the simulated and projected step times and the run."""
    wall0 = time.perf_counter()
    proj = project(workload, topology, layout, gpus)
    r = resolve(layout, workload, gpus, topology.accelerators_per_node)
    w = workload
    pp, m, t = r.pp, r.micro_batches, r.tp
    per_node = topology.accelerators_per_node
    tokens = w.micro_batch * w.seq_len / r.cp
    act = tokens * w.hidden * 2  # one micro-batch's activations, 16 bits
    sp = layout.sp and t > 1
    _, pp_stride = r.placement["pp"]
    stage_of = lambda g: (g // pp_stride) % pp  # noqa: E731
    colls: list[Collective] = []

    def groups_of(dim: str, stage: int) -> np.ndarray:
        size, stride = r.placement[dim]
        g = groups_by_stride(gpus, size, stride)
        return g[stage_of(g[:, 0]) == stage]

    last: dict[int, str] = {}
    names: dict[tuple[str, int, int], str] = {}  # (pass, stage, micro-batch) -> its last collective
    pp_groups = groups_by_stride(gpus, pp, pp_stride) if pp > 1 else None
    ops = {s: _schedule(pp, m, s) for s in range(pp)}
    cursor = {s: 0 for s in range(pp)}
    # emit in an order where every dependency is already defined: sweep the stages until all ops are placed
    pending = sum(len(v) for v in ops.values())
    while pending:
        progressed = False
        for s in range(pp):
            while cursor[s] < len(ops[s]):
                kind, i = ops[s][cursor[s]]
                src = (kind, s - 1, i) if kind == "F" else (kind, s + 1, i)
                needs_input = (kind == "F" and s > 0) or (kind == "B" and s < pp - 1)
                if needs_input and src not in names:
                    break
                st = proj.stages[s]
                own = st["per_micro_batch_s"] - st["tp_comm"] - st["pp_comm"] - st["ep_comm"] - st["cp_comm"]
                compute = own / 3.0 if kind == "F" else own * 2.0 / 3.0
                after = tuple(x for x in (last.get(s), f"{names[src]}>send" if needs_input else None) if x)
                base = f"{kind}{i}@s{s}"
                if t > 1:
                    n = int(st["layers"]) or 1
                    tp = groups_of("tp", s)
                    # sequence parallel: an all-gather then a reduce-scatter per layer pair; else an all-reduce
                    tp_ops = (("ag", "all_gather"), ("rs", "reduce_scatter")) if sp else (("ar", "all_reduce"),)
                    chain, delay = after, compute
                    for tag, op in tp_ops:
                        label = f"{base}/{tag}"
                        colls.append(
                            Collective(
                                label,
                                op,
                                2 * n * act,
                                tp,
                                after=chain,
                                delay_s=delay,
                                communicator=f"tp{s}",
                                lockstep=True,
                            )
                        )
                        chain, delay = (label,), 0.0
                    end = chain[0]
                else:
                    colls.append(_delay(f"{base}/compute", compute, after))
                    end = f"{base}/compute"
                last[s] = end
                names[(kind, s, i)] = end
                nxt = s + 1 if kind == "F" else s - 1
                if pp_groups is not None and 0 <= nxt < pp:
                    pair = pp_groups[:, [nxt, s]]  # binomial broadcast on 2 ranks: rank 1 (this stage) -> rank 0
                    colls.append(
                        Collective(
                            f"{end}>send",
                            "broadcast",
                            act / (t if (sp or layout.pp_scatter_gather) else 1),
                            pair,
                            algo="binomial",
                            after=(end,),
                            communicator=f"pp{min(s, nxt)}",
                            lockstep=True,
                        )
                    )
                cursor[s] += 1
                pending -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("1F1B schedule could not be ordered")
    params = stage_parameters(w, r)
    if r.dp > 1:
        for s in range(pp):
            dense = params[s][0] + params[s][1]
            grads = dense * layout.grad_reduce_bytes
            # ZeRO 0: one all-reduce; ZeRO 1/2: reduce-scatter, then the updated parameters all-gathered
            steps = [("ar", "all_reduce", grads)] if layout.zero == 0 else [
                ("rs", "reduce_scatter", grads),
                ("ag", "all_gather", dense * 2),
            ]  # fmt: skip
            prev = last[s]
            for suffix, op, nbytes in steps:
                name = f"dp@s{s}/{suffix}"
                colls.append(
                    Collective(
                        name, op, nbytes, groups_of("dp", s), after=(prev,), communicator=f"dp{s}", lockstep=True
                    )
                )
                prev = name
    nodes = max(1, -(-gpus // per_node))
    result = simulate(topology, nodes, colls, routing=routing, seed=seed, qps=qps, faults=faults)
    parts: dict[str, float] = {}
    for c in result.collectives:
        kind = c.name.rsplit("/", 1)[-1] if "/" in c.name else "pp_send"
        key = {"ag": "tp", "rs": "tp", "ar": "tp", "compute": "compute"}.get(kind, kind)
        if c.name.startswith("dp@"):
            key = "dp"
        elif ">send" in c.name:
            key = "pp"
        parts[key] = parts.get(key, 0.0) + c.time_s
    return {
        "format": "commlens.sim-step/1",
        "workload": w.name,
        "topology": topology.name,
        "gpus": gpus,
        "layout": proj.layout,
        "micro_batches": m,
        "collectives": len(colls),
        "step_time_s": result.makespan_s,
        "projected_step_time_s": proj.step_time_s,
        "communication_s": parts,
        "routing": routing,
        "seed": seed,
        "events": result.events,
        "rate_recomputations": result.recomputations,
        "hottest_links": result.hottest,
        "link_classes": result.classes,
        "fabric": result.fabric,
        "wall_s": time.perf_counter() - wall0,
    }


def _delay(name: str, seconds: float, after: tuple[str, ...]) -> Collective:
    """A compute-only step (no TP): a one-rank collective that only waits."""
    return Collective(
        name, "all_reduce", 0.0, np.zeros((1, 1), dtype=np.int64), after=after, delay_s=seconds, lockstep=True
    )
