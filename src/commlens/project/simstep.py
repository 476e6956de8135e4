"""One whole training step simulated on the fabric, every parallel group at once (``commlens sim step``).

:func:`simulate_step` takes the projection's :class:`commlens.project.Scenario` (its ``sim`` options, default
:class:`SimOptions`) and returns a :class:`SimStep`. The projection (:func:`commlens.project.run`, analytic network)
gives each pipeline stage's compute per
micro-batch; the step is then rebuilt as a DAG of collectives on the fabric of the whole job and simulated:

- each stage runs 1F1B (Megatron's order: ``pp - s - 1`` warm-up forwards, then one forward and one backward in
  turn, then the cool-down backwards); a forward is its compute (a third of the stage's, the backward two thirds;
  under full recomputation a quarter, and the backward redoes the forward and its collectives; under a layer
  count, ``recompute_layers``, only the recomputed layers' share of them) followed by its TP communication (all-gather and reduce-scatter of every layer's activations, with SP; or
  all-reduce) and its MoE layers' all-to-alls over the EP groups (with the all-to-all dispatcher and expert TP,
  each rank's own sequence shard, then the expert-TP groups' all-gather and reduce-scatter of the gathered copies,
  as ``step._etp_gather_s`` prices them), summed over the stage's layers into one collective of each kind; under CP, the all-gather of K and V (backward: and the reduce-scatter of their
  gradients) runs alongside the compute, hidden behind it where it can be;
- a forward's activations go to the next stage, a backward's gradients to the previous one (every pipeline's
  send at once), and the receiving stage's pass waits for them; under ``pp_p2p: serial`` (DeepSpeed's pipeline
  engine) each exchange is a blocking send met by a blocking receive, so it starts when both stages reach it in
  their command order and holds both until it ends, with TP after a shape header, and the partitioned tensor is
  rebuilt by a TP all-gather (:func:`_serial_commands`, :meth:`_StepGraph.add_serial_schedule`);
- after a stage's last backward its DP reduce-scatter (and parameter all-gather under ZeRO 1/2, all-reduce under
  ZeRO 0) starts, over the DP (x CP) groups of that stage for dense parameters and the expert-data-parallel
  groups for experts', while the other stages still compute and communicate.

Data-parallel replicas run in lockstep (each collective's groups are one task), so thousands of groups cost one
task per collective. The interleaved schedule is not rebuilt (virtual stages run as one); the step time is the
last stage's DP tail. The simulated step and its parts are compared with the projection's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from commlens.project.compute import stream_time_s
from commlens.project.frameworks import framework
from commlens.project.hardware import device_for
from commlens.project.layout import ParallelLayout, Resolved, resolve
from commlens.project.memory import stage_layer_kinds, stage_parameters, stage_recompute
from commlens.project.scenario import Scenario
from commlens.project.step import PP_HEADER_BYTES
from commlens.project.step import run as run_projection
from commlens.sim import Collective, CollectiveResult, SimConfig, SimOptions, groups_by_stride
from commlens.sim import run as run_sim
from commlens.sim.fabric import FabricDoc
from commlens.workload import Workload

__all__ = ["SimStep", "simulate_step"]


@dataclass(frozen=True)
class SimStep:
    """One simulated step beside the projection's (``commlens sim step``; :meth:`as_dict` is its ``--json``)."""

    workload: str
    topology: str
    gpus: int
    layout: dict[str, object]  # the projection's layout, resolved
    micro_batches: int
    collectives: int  # collectives in the step's DAG
    step_time_s: float  # simulated
    projected_step_time_s: float  # the projection's, analytic network
    communication_s: dict[str, float]  # simulated seconds by parallel dimension
    options: SimOptions  # how the step was simulated
    events: int
    rate_recomputations: int
    hottest_links: list[dict[str, object]]
    link_classes: list[dict[str, object]]
    fabric: FabricDoc
    wall_s: float

    def as_dict(self) -> dict[str, object]:
        """The step as JSON (``commlens.sim-step/1``)."""
        return {
            "format": "commlens.sim-step/1",
            "workload": self.workload,
            "topology": self.topology,
            "gpus": self.gpus,
            "layout": self.layout,
            "micro_batches": self.micro_batches,
            "collectives": self.collectives,
            "step_time_s": self.step_time_s,
            "projected_step_time_s": self.projected_step_time_s,
            "communication_s": self.communication_s,
            **self.options.as_dict(),
            "events": self.events,
            "rate_recomputations": self.rate_recomputations,
            "hottest_links": self.hottest_links,
            "link_classes": self.link_classes,
            "fabric": self.fabric,
            "wall_s": self.wall_s,
        }


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


def _serial_commands(pp: int, m: int, s: int) -> list[tuple[str, int]]:
    """Stage ``s``'s commands in DeepSpeed's pipeline engine (microsoft/DeepSpeed v0.5.4 deepspeed/runtime/pipe/
    schedule.py ``TrainSchedule``): the passes in 1F1B order (its even/odd step mapping gives Megatron's order,
    :func:`_schedule`), each exchange a blocking call placed as its steps place them:

    1. before a forward, its activation received (``RecvActivation``), then the gradient of the backward before it
       sent back (``SendGrad``, deferred to this forward step);
    2. after a forward, its activation sent on at once (``SendActivation``, the next step's first command);
    3. before a backward, a gradient still owed sent back first, then its gradient received (``RecvGrad``);
    4. after the last backward, its gradient sent back.

    (command, micro-batch): ``F``, ``B``, ``recv_act``, ``send_act``, ``recv_grad``, ``send_grad``."""
    out: list[tuple[str, int]] = []
    owed: int | None = None  # a backward's input gradient not yet sent back
    for kind, i in _schedule(pp, m, s):
        if kind == "F":
            out += [("recv_act", i)] if s > 0 else []
            out += [("send_grad", owed)] if owed is not None else []
            out += [("F", i)] + ([("send_act", i)] if s < pp - 1 else [])
        else:
            out += [("send_grad", owed)] if owed is not None else []
            out += [("recv_grad", i)] if s < pp - 1 else []
            out.append(("B", i))
        owed = i if kind == "B" and s > 0 else None
    return out + ([("send_grad", owed)] if owed is not None else [])


def simulate_step(scenario: Scenario) -> SimStep:
    """Simulate one step of ``scenario`` with its ``sim`` options (default :class:`SimOptions`), beside the
    projection of the same scenario over the analytic network."""
    w, topology, layout, gpus = scenario.workload, scenario.topology, scenario.layout, scenario.gpus
    opts = scenario.sim if scenario.sim is not None else SimOptions()
    wall0 = time.perf_counter()
    proj = run_projection(replace(scenario, sim=None))
    graph = _StepGraph(w, layout, resolve(layout, w, gpus, topology.accelerators_per_node), gpus)
    if graph.r.pp > 1 and (layout.pp_p2p or framework(layout.framework).pp_p2p) == "serial":
        dev = device_for(topology.accelerator.name, scenario.accelerators)
        graph.add_serial_schedule(proj.stages, stream_time_s(dev, graph.act))
    else:
        graph.add_schedule(proj.stages)
    graph.add_dp_tails()
    colls = graph.colls
    nodes = max(1, -(-gpus // topology.accelerators_per_node))
    result = run_sim(SimConfig(topology, nodes, tuple(colls), opts))
    return SimStep(
        workload=w.name,
        topology=topology.name,
        gpus=gpus,
        layout=proj.layout,
        micro_batches=graph.r.micro_batches,
        collectives=len(colls),
        step_time_s=result.makespan_s,
        projected_step_time_s=proj.step_time_s,
        communication_s=_communication_s(result.collectives),
        options=opts,
        events=result.events,
        rate_recomputations=result.recomputations,
        hottest_links=result.hottest,
        link_classes=result.classes,
        fabric=result.fabric,
        wall_s=time.perf_counter() - wall0,
    )


def _communication_s(collectives: Sequence[CollectiveResult]) -> dict[str, float]:
    """Simulated seconds by parallel dimension (tp, cp, ep, pp, dp, edp), summed over the step's collectives."""
    parts: dict[str, float] = {}
    for c in collectives:
        kind = c.name.rsplit("/", 1)[-1]
        if c.name.startswith(("dp@", "edp@")):
            key = c.name.split("@", 1)[0]
        elif ">send" in c.name:
            key = "pp"
        elif kind in ("compute", "join"):
            continue
        else:
            key = {"ag": "tp", "rs": "tp", "ar": "tp", "ep": "ep", "etp-ag": "ep", "etp-rs": "ep"}.get(kind, "cp")
        parts[key] = parts.get(key, 0.0) + c.time_s
    return parts


class _StepGraph:
    """One step's DAG of collectives, built pass by pass in 1F1B order (``colls``)."""

    def __init__(self, w: Workload, layout: ParallelLayout, r: Resolved, gpus: int) -> None:
        self.w, self.layout, self.r, self.gpus = w, layout, r, gpus
        self.colls: list[Collective] = []
        t = r.tp
        tokens = w.micro_batch * w.seq_len / r.cp
        self.act = tokens * w.hidden * 2  # one micro-batch's activations, 16 bits
        self.sp = layout.sp and t > 1
        self.pp_stride = r.placement["pp"][1]
        # layers per stage whose forward full recomputation runs again in the backward: all of them, or under a layer
        # count (recompute_layers) those it names (memory.stage_recompute, as the projection prices them)
        # (an empty stage as under full recomputation of every layer, as the projection takes it)
        rc = stage_recompute(w, layout, r)
        full = layout.recompute == "full"
        self.redone = [(x[0] + x[1]) if n or not full else 1 for x, n in zip(rc, r.stage_layers, strict=True)]
        self.redone_moe = [x[1] for x in rc]
        # per layer of one micro-batch, as the projection prices them: TP activations; CP's K and V of the whole
        # sequence; the token copies EP dispatches and combines (16 bits)
        self.cp_kv = 2 * w.micro_batch * w.seq_len * max(w.kv_heads_n / t, 1.0) * w.head_size * 2 if r.cp > 1 else 0.0
        moe = w.moe
        # each rank's routed copies as step._layer_kinds counts them: its tokens into the dispatcher are TP / expert
        # TP sequence shards; the all-to-all dispatcher sends its own shard over EP and gathers the expert-TP group's
        # copies after the transfer (step._etp_gather_s) [27 s16 simetp]
        self.etp = r.expert_tp if moe is not None and r.ep > 1 and layout.moe_dispatcher == "alltoall" else 1
        routed = tokens * r.expert_tp / t / (r.expert_tp if layout.moe_dispatcher == "alltoall" else 1)
        self.a2a = (
            routed * moe.top_k * (moe.capacity_factor or 1.0) * w.hidden * 2.0 if moe is not None and r.ep > 1 else 0.0
        )
        self.layer_kinds = stage_layer_kinds(w, r)
        if w.mtp_layers:  # the multi-token prediction modules' layers, on the last stage (memory.mtp_stage_parameters)
            dense_n, moe_n = self.layer_kinds[-1]
            mtp = (0, w.mtp_layers) if w.mtp_moe else (w.mtp_layers, 0)
            self.layer_kinds[-1] = (dense_n + mtp[0], moe_n + mtp[1])

    def groups_of(self, dim: str, stage: int) -> np.ndarray:
        """The groups of dimension ``dim`` on pipeline stage ``stage`` (one row of ranks each)."""
        size, stride = (self.r.expert_tp, 1) if dim == "etp" else self.r.placement[dim]
        g = groups_by_stride(self.gpus, size, stride)
        return g[(g[:, 0] // self.pp_stride) % self.r.pp == stage]

    def add_pass(self, base: str, kind: str, s: int, compute: float, after: tuple[str, ...]) -> str:
        """Add one pass of stage ``s``; returns its last collective. Its compute runs first, CP's K/V exchange
        alongside it (hidden behind it where it can be), then TP's collectives and EP's all-to-alls in turn."""
        t, act, cp_kv, colls = self.r.tp, self.act, self.cp_kv, self.colls
        n = sum(self.layer_kinds[s]) or 1
        moe_n = self.layer_kinds[s][1]
        # a backward under full recomputation redoes the recomputed layers' forwards first, their collectives too
        rc = 0 if kind == "F" else self.redone[s]
        moe_rc = 0 if kind == "F" else self.redone_moe[s]
        serial: list[tuple[str, str, float, str]] = []  # (suffix, op, bytes, dimension), one after another
        if t > 1:
            if self.sp:  # an all-gather then a reduce-scatter per layer pair
                serial += [
                    ("ag", "all_gather", 2 * (n + rc) * act, "tp"),
                    ("rs", "reduce_scatter", 2 * (n + rc) * act, "tp"),
                ]
            else:
                serial.append(("ar", "all_reduce", 2 * (n + rc) * act, "tp"))
        if self.a2a and moe_n:  # dispatch and combine of every MoE layer
            serial.append(("ep", "all_to_all", 2 * (moe_n + moe_rc) * self.a2a, "ep"))
            if self.etp > 1:  # the expert-TP group's copies gathered, the experts' output reduce-scattered
                gathered = (moe_n + moe_rc) * self.a2a * self.etp
                serial += [
                    ("etp-ag", "all_gather", gathered, "etp"),
                    ("etp-rs", "reduce_scatter", gathered, "etp"),
                ]
        fold = serial and not cp_kv  # the compute is then the first collective's wait: a task fewer per pass
        chain = after
        if not fold:
            joins = [f"{base}/compute"]
            colls.append(_delay(joins[0], compute, after))
            if cp_kv:  # (the recomputed layers' all-gather, then) the pass's, and the backward's reduce-scatter
                cp_ops = [("cp-ag", "all_gather", rc)] if rc else []
                cp_ops += [("cp-ag", "all_gather", n)] + ([("cp-rs", "reduce_scatter", n)] if kind == "B" else [])
                for k, (suffix, op, layers) in enumerate(cp_ops):
                    label = f"{base}/{suffix}{k}"
                    colls.append(
                        Collective(
                            label,
                            op,
                            layers * cp_kv,
                            self.groups_of("cp", s),
                            after=chain,
                            communicator=f"cp{s}",
                            lockstep=True,
                        )
                    )
                    chain = (label,)
                joins.append(chain[0])
            chain = tuple(joins)
        delay = compute if fold else 0.0
        for suffix, op, nbytes, dim in serial:
            label = f"{base}/{suffix}"
            colls.append(
                Collective(
                    label,
                    op,
                    nbytes,
                    self.groups_of(dim, s),
                    after=chain,
                    delay_s=delay,
                    communicator=f"{dim}{s}",
                    lockstep=True,
                )
            )
            chain, delay = (label,), 0.0
        if len(chain) > 1:  # compute and CP both end the pass
            colls.append(_delay(f"{base}/join", 0.0, chain))
            chain = (f"{base}/join",)
        return chain[0]

    def add_schedule(self, proj_stages: list[dict[str, float]]) -> None:
        """Every stage's passes in 1F1B order, each after its input from the neighbouring stage, with the sends;
        each pass's compute is its share of the projected stage's time without communication."""
        pp, m = self.r.pp, self.r.micro_batches
        last: dict[int, str] = {}
        names: dict[tuple[str, int, int], str] = {}  # (pass, stage, micro-batch) -> its last collective
        pp_groups = groups_by_stride(self.gpus, pp, self.pp_stride) if pp > 1 else None
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
                    compute = self._pass_compute(proj_stages[s], kind, s)
                    after = tuple(x for x in (last.get(s), f"{names[src]}>send" if needs_input else None) if x)
                    end = self.add_pass(f"{kind}{i}@s{s}", kind, s, compute, after)
                    last[s] = end
                    names[(kind, s, i)] = end
                    nxt = s + 1 if kind == "F" else s - 1
                    if pp_groups is not None and 0 <= nxt < pp:
                        self._add_send(end, pp_groups[:, [nxt, s]], s, nxt)
                    cursor[s] += 1
                    pending -= 1
                    progressed = True
            if not progressed:
                raise RuntimeError("1F1B schedule could not be ordered")
        self.last = last

    def _pass_compute(self, st: dict[str, float], kind: str, s: int) -> float:
        """A pass's share of the projected stage's time without communication: a forward one of (fwd_passes
        forwards + a backward of twice a forward), fwd_passes 1 + the share of stage ``s``'s layers recomputed."""
        fwd_passes = 1.0 + min(1.0, self.redone[s] / (sum(self.layer_kinds[s]) or 1))
        own = st["per_micro_batch_s"] - st["tp_comm"] - st["pp_comm"] - st["ep_comm"] - st["cp_comm"]
        return own / (fwd_passes + 2) if kind == "F" else own * (fwd_passes + 1) / (fwd_passes + 2)

    def add_serial_schedule(self, proj_stages: list[dict[str, float]], copy_s: float) -> None:
        """Every stage's commands (:func:`_serial_commands`), each exchange one blocking send/receive after both
        stages' previous commands (with TP a shape header first), each pass after its stage's last command. With
        TP the engine partitions what it sends and rebuilds it whole (step._pp_p2p_serial): a TP all-gather before
        a forward (its input) and two before a backward (its output and the gradient), a zero-fill and a clone each
        (``copy_s``: the time to stream one activation's bytes; a rebuild streams 3 of them, a partition 2 / TP) in the
        pass, as the projection prices them for every stage."""
        pp, m, t = self.r.pp, self.r.micro_batches, self.r.tp
        split = t if (self.sp or self.layout.pp_scatter_gather) else 1
        gathers = {"F": 1, "B": 2} if t > 1 and not self.sp and split > 1 else {"F": 0, "B": 0}
        copies = {"F": 3 + 2 / split, "B": 6 + 2 / split} if split > 1 else {"F": 0.0, "B": 0.0}
        pp_groups = groups_by_stride(self.gpus, pp, self.pp_stride)
        cmds = {s: _serial_commands(pp, m, s) for s in range(pp)}
        cursor = dict.fromkeys(range(pp), 0)
        last: dict[int, tuple[str, ...]] = {s: () for s in range(pp)}
        pending = sum(len(v) for v in cmds.values())
        while pending:
            progressed = False
            for s in range(pp):
                while cursor[s] < len(cmds[s]):
                    op, i = cmds[s][cursor[s]]
                    if op in ("F", "B"):
                        after = last[s]
                        for k in range(gathers[op]):  # the partitioned tensors rebuilt over TP
                            name = f"{op}{i}@s{s}/rebuild{k}/ag"
                            self.colls.append(
                                Collective(
                                    name,
                                    "all_gather",
                                    self.act,
                                    self.groups_of("tp", s),
                                    after=after,
                                    communicator=f"tp{s}",
                                    lockstep=True,
                                )
                            )
                            after = (name,)
                        compute = self._pass_compute(proj_stages[s], op, s) + copies[op] * copy_s
                        last[s] = (self.add_pass(f"{op}{i}@s{s}", op, s, compute, after),)
                    elif op.startswith("send"):
                        peer = s + 1 if op == "send_act" else s - 1
                        want = ("recv_act" if op == "send_act" else "recv_grad", i)
                        if cursor[peer] >= len(cmds[peer]) or cmds[peer][cursor[peer]] != want:
                            break  # the receiver has not reached its receive yet
                        pair = pp_groups[:, [peer, s]]
                        end = self._add_exchange(f"{op}{i}@s{s}", pair, (s, peer), split, last[s] + last[peer])
                        last[s] = last[peer] = (end,)
                        cursor[peer] += 1
                        pending -= 1
                    else:
                        break  # a receive: met by its sender's send
                    cursor[s] += 1
                    pending -= 1
                    progressed = True
            if not progressed:
                raise RuntimeError("the serial pipeline exchange could not be ordered")
        self.last = {s: names[0] for s, names in last.items()}

    def _add_exchange(
        self, label: str, pair: np.ndarray, stages: tuple[int, int], split: int, after: tuple[str, ...]
    ) -> str:
        """One blocking exchange between two neighbouring ``stages`` (with TP, its shape header first), after
        ``after`` (both stages' previous commands): binomial broadcasts on 2 ranks; returns the last one's name."""
        parts = ([("header", float(PP_HEADER_BYTES))] if split > 1 else []) + [("tensor", self.act / split)]
        for part, nbytes in parts:
            name = f"{label}>send-{part}"
            self.colls.append(
                Collective(
                    name,
                    "broadcast",
                    nbytes,
                    pair,
                    algo="binomial",
                    after=after,
                    communicator=f"pp{min(stages)}",
                    lockstep=True,
                )
            )
            after = (name,)
        return after[0]

    def _add_send(self, end: str, pair: np.ndarray, s: int, nxt: int) -> None:
        """A pass's output to the neighbouring stage: a binomial broadcast on 2 ranks, rank 1 (this stage) -> 0."""
        self.colls.append(
            Collective(
                f"{end}>send",
                "broadcast",
                self.act / (self.r.tp if (self.sp or self.layout.pp_scatter_gather) else 1),
                pair,
                algo="binomial",
                after=(end,),
                communicator=f"pp{min(s, nxt)}",
                lockstep=True,
            )
        )

    def add_dp_tails(self) -> None:
        """After each stage's last backward, its gradients reduced: dense parameters over DP (x CP), experts' over
        the expert-data-parallel groups."""
        w, r, layout, moe = self.w, self.r, self.layout, self.w.moe
        params = stage_parameters(w, r, layout.schedule)
        tails = [("dp", 0, r.placement["dp"][0])] + ([("edp", 1, r.placement["edp"][0])] if moe is not None else [])
        for s in range(r.pp):
            for dim, which, size in tails:
                count = params[s][which] if moe is not None else params[s][0] + params[s][1]
                if size < 2 or count <= 0:
                    continue
                grads = count * layout.grad_reduce_bytes
                # ZeRO 0: one all-reduce; ZeRO 1/2: reduce-scatter, then the updated parameters all-gathered
                steps = [("ar", "all_reduce", grads)] if layout.zero == 0 else [
                    ("rs", "reduce_scatter", grads),
                    ("ag", "all_gather", count * 2),
                ]  # fmt: skip
                prev = self.last[s]
                for suffix, op, nbytes in steps:
                    name = f"{dim}@s{s}/{suffix}"
                    self.colls.append(
                        Collective(
                            name,
                            op,
                            nbytes,
                            self.groups_of(dim, s),
                            after=(prev,),
                            communicator=f"{dim}{s}",
                            lockstep=True,
                        )
                    )
                    prev = name


def _delay(name: str, seconds: float, after: tuple[str, ...]) -> Collective:
    """A compute-only step (no TP): a one-rank collective that only waits."""
    return Collective(
        name, "all_reduce", 0.0, np.zeros((1, 1), dtype=np.int64), after=after, delay_s=seconds, lockstep=True
    )
