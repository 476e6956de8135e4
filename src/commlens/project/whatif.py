"""What would help most: single changes to one projection, each projected by the model itself.

:func:`explore` takes a projected point and tries one change at a time, the
same job throughout (GPU count and global batch fixed):

1. the candidates, from the point's own layout, workload and topology: TP x2
   and /2, PP x2 and /2, CP x2, VPP x2 (PP > 1), half the micro-batch (twice
   the micro-batches), one step less recomputation, every other ZeRO stage
   (when there is data parallelism), the next bigger scale-up domain (72,
   NVL72-class, alone and with TP doubled inside it: the faster counts), NICs
   x2, fp8 (for bf16), the layout on each other framework (NeMo counts as Megatron-Core; the settings the other
   stack lacks turned off and named, :func:`_carry_over`), torch.compile where the stack does not compile, the
   zero-bubble schedule where the stack has it, and the stack's own settings the layout leaves off
   (:func:`_setting_candidates`: EP overlap, fp8 attention, the fused MLP with its budget and whole-step graph,
   CUDA graph scopes, fp8 parameter gathers; torchtitan's deferred FSDP reduction and Dist-MoE);
2. each one projected with :func:`commlens.project.sweep.project_point`; one
   the model refuses (:class:`InfeasibleLayoutError`: memory, divisibility,
   placement; :class:`ProjectionError`: what the hardware lacks, as fp8 on an
   A100) is kept with its reason, except a stack setting refused for anything but memory, which is not offered
   (the stack cannot run it there) and not counted;
3. the gain of each change: old step time / new step time - 1; those above
   :data:`MIN_GAIN`, largest first, make the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from commlens.project.abevidence import Evidence, evidence
from commlens.project.errors import InfeasibleLayoutError, ProjectionError
from commlens.project.sweep import SCALE_UP_DOMAIN, Overrides, layout_from, point_inputs, project_point
from commlens.specdata import SpecValue

if TYPE_CHECKING:
    from commlens.project.layout import ParallelLayout
    from commlens.project.step import Projection
    from commlens.project.sweep import Base

__all__ = ["Change", "Refusal", "WhatIf", "explore", "what_if"]

MIN_GAIN = 0.005  # a change shorter by less than this is noise in the model, not advice
# Scale-up domain sizes of shipped presets: 8 (dgx-a100, dgx-h100, dgx-h200) and 72 (gb200-nvl72).
DOMAIN_SIZES = (8, 72)
# Which refusals a reader most wants explained: the ones that would run with more memory first.
_REFUSAL_ORDER = {"memory": 0, "unsupported": 1, "topology": 2, "divides": 3}


@dataclass(frozen=True)
class Change:
    """One single change and its projection."""

    label: str  # "TP 8 -> 16"
    point: Overrides  # the overrides that realise it (the original point's included)
    step_time_s: float
    tokens_per_s: float
    mfu: float
    gain: float  # step-time speedup: old / new - 1
    memory_bytes_per_gpu: float
    evidence: Evidence | None = None  # the published A/B pairs of the same change (commlens.project.abevidence)

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "point": dict(self.point),
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "gain": self.gain,
            "memory_bytes_per_gpu": self.memory_bytes_per_gpu,
            "published_pairs": None if self.evidence is None else self.evidence.as_dict(),
        }


@dataclass(frozen=True)
class Refusal:
    """A candidate the model refuses, and why."""

    label: str
    reason: str  # "needs 91 GB per GPU, has 80"
    kind: str  # InfeasibleLayoutError.kind (memory, divides, topology, ...), or unsupported

    def as_dict(self) -> dict[str, str]:
        return {"label": self.label, "reason": self.reason, "kind": self.kind}


@dataclass(frozen=True)
class WhatIf:
    """The answer: the best changes, largest gain first, and every refused candidate (most telling first)."""

    changes: tuple[Change, ...]
    refused: tuple[Refusal, ...]
    tried: int  # candidates projected, refused ones included

    def as_dict(self, refused: int = 3) -> dict[str, object]:
        return {
            "changes": [c.as_dict() for c in self.changes],
            "refused": [r.as_dict() for r in self.refused[:refused]],
            "tried": self.tried,
            "refused_count": len(self.refused),
        }


def what_if(base: Base, point: Overrides, top: int = 3) -> list[Change]:
    """The ``top`` single changes that shorten the step most (gain > :data:`MIN_GAIN`), largest gain first."""
    return list(explore(base, point, top).changes)


def explore(base: Base, point: Overrides, top: int = 3, current: Projection | None = None) -> WhatIf:
    """:func:`what_if` with the refused candidates; ``current``: the point's projection, if already made."""
    if top < 1:
        raise ValueError(f"top: must be >= 1, got {top}")
    now = current if current is not None else project_point(base, point)
    changes: list[Change] = []
    refused: list[Refusal] = []
    silent = 0
    candidates = _candidates(base, point, now)
    settings = _setting_candidates(base, point, now)
    quiet = {label for label, _ in settings}  # offered only where the model runs them, see _setting_candidates
    candidates += settings
    for label, variants in candidates:
        best: Change | None = None
        best_delta: Overrides = {}
        refusal: Refusal | None = None
        for variant_label, delta in variants:
            new_point = {**point, **delta}
            try:
                p = project_point(base, new_point)
            except InfeasibleLayoutError as e:
                refusal = refusal or Refusal(variant_label, str(e), e.kind)
                continue
            except ProjectionError as e:  # what the hardware lacks (fp8 on an A100)
                refusal = refusal or Refusal(variant_label, str(e).splitlines()[0], "unsupported")
                continue
            if best is None or p.step_time_s < best.step_time_s:
                best = Change(
                    variant_label,
                    new_point,
                    p.step_time_s,
                    p.tokens_per_s,
                    p.mfu,
                    now.step_time_s / p.step_time_s - 1.0,
                    p.memory_bytes_per_gpu,
                )
                best_delta = delta
        if best is not None:
            if best.gain > MIN_GAIN:  # the published pairs of a change that is listed
                changes.append(replace(best, evidence=_evidence(base, point, best_delta)))
        elif refusal is not None and (label not in quiet or refusal.kind == "memory"):
            refused.append(refusal)
        elif refusal is not None:
            silent += 1  # a setting the stack cannot run here: not offered, not counted
    changes.sort(key=lambda c: c.gain, reverse=True)
    order = {label: i for i, (label, _) in enumerate(candidates)}
    refused.sort(key=lambda r: (_REFUSAL_ORDER.get(r.kind, len(_REFUSAL_ORDER)), order.get(r.label, 0)))
    return WhatIf(tuple(changes[:top]), tuple(refused), len(candidates) - silent)


Variant = tuple[str, Overrides]  # (label, the overrides it adds to the point)


def _evidence(base: Base, point: Overrides, delta: Overrides) -> Evidence | None:
    """The published A/B pairs of a change of one field (layout or workload) from the point's value to the delta's;
    None for a change of several fields, of the topology or GPU count, or without pairs."""
    if len(delta) != 1:
        return None
    ((path, after),) = delta.items()
    head, _, name = path.partition(".")
    if head == "layout":
        _, _, _, fields = point_inputs(base, point)
        before = fields.get(name)
    elif head == "workload":
        w, _, _, _ = point_inputs(base, point)
        before = getattr(w, name, None)
    else:
        return None
    return evidence(path, before, after)


def _candidates(base: Base, point: Overrides, now: Projection) -> list[tuple[str, list[Variant]]]:
    """Every candidate change: (label, its variants); a candidate's best feasible variant stands for it."""
    w, topo, _, fields = point_inputs(base, point)
    lay = now.layout
    tp, pp, cp, vpp, zero, ep = (int(lay[k]) for k in ("tp", "pp", "cp", "vpp", "zero", "ep"))  # type: ignore[call-overload]
    m, dp = int(lay["micro_batches"]), int(lay["dp"])  # type: ignore[call-overload]
    out: list[tuple[str, list[Variant]]] = []

    def one(label: str, **delta: SpecValue) -> None:
        out.append((label, [(label, delta)]))

    one(f"TP {tp} -> {2 * tp}", **{"layout.tp": 2 * tp})
    if tp > 1:
        one(f"TP {tp} -> {tp // 2}", **{"layout.tp": tp // 2})
    one(f"PP {pp} -> {2 * pp} (vpp {vpp})", **{"layout.pp": 2 * pp})
    if pp > 1:
        half_vpp = vpp if pp > 2 else 1  # one stage cannot interleave
        one(f"PP {pp} -> {pp // 2} (vpp {half_vpp})", **{"layout.pp": pp // 2, "layout.vpp": half_vpp})
        one(f"VPP {vpp} -> {2 * vpp}", **{"layout.vpp": 2 * vpp})
    one(f"CP {cp} -> {2 * cp}", **{"layout.cp": 2 * cp})
    if w.micro_batch > 1 and w.micro_batch % 2 == 0:
        one(
            f"micro-batch {w.micro_batch} -> {w.micro_batch // 2} ({m} -> {2 * m} micro-batches)",
            **{"workload.micro_batch": w.micro_batch // 2},
        )
    less = {"full": ("selective", "none"), "selective": ("none",), "none": ()}[str(lay["recompute"])]
    count = lay.get("recompute_layers")  # full recomputation of a layer count: dropped with it
    now_rc = f"full ({lay['recompute_method']} {count})" if count is not None else str(lay["recompute"])
    cleared: dict[str, SpecValue] = {"layout.recompute_layers": None, "layout.recompute_method": None} if count else {}
    for recompute in less:
        one(f"recompute {now_rc} -> {recompute}", **{"layout.recompute": recompute, **cleared})
    if dp * cp > 1:
        for stage in (0, 1, 2, 3):
            if stage != zero:
                one(f"ZeRO {zero} -> {stage}", **{"layout.zero": stage})
    domain = topo.scale_up.domain_size
    bigger = [s for s in DOMAIN_SIZES if s > domain and s % topo.accelerators_per_node == 0]
    if bigger and now.gpus > domain:
        size = bigger[0]
        label = f"scale-up domain {domain} -> {size} GPUs"
        variants: list[Variant] = [(label, {f"topology.{SCALE_UP_DOMAIN}": size})]
        if 2 * tp <= size:
            variants.append(
                (f"{label} (TP {tp} -> {2 * tp} inside it)", {f"topology.{SCALE_UP_DOMAIN}": size, "layout.tp": 2 * tp})
            )
        out.append((label, variants))
    if topo.scale_out is not None and now.gpus > topo.accelerators_per_node:
        gbps = topo.scale_out.nic_bandwidth_bytes_per_s * 8 / 1e9
        one(f"NICs {gbps:.0f} -> {2 * gbps:.0f} Gb/s", **{"topology.nic_gbps": 2 * gbps})
    if w.precision == "bf16":
        one("fp8", **{"workload.precision": "fp8"})
    # the same layout as another stack runs it, and what the current stack offers but does not use
    from commlens.project.frameworks import framework, framework_names

    current = str(now.framework)
    fw = framework(current)
    used = {d for d, size in (("tp", tp), ("cp", cp), ("pp", pp), ("ep", ep)) if size > 1}
    for other in framework_names():
        # NeMo runs Megatron-Core (its profile is megatron-core's: offered as megatron-core); a past release's
        # profile (nemo-24.03) describes published runs, not a choice; a stack without one of the layout's parallel
        # dimensions cannot run it [27 s21 parallel]
        of = framework(other)
        if (
            other != current
            and other != "nemo"
            and {other, current} != {"nemo", "megatron-core"}
            and not of.release_of
            and used <= set(of.parallel)
        ):
            carried, dropped = _carry_over(fields, other)
            without = f" (without {', '.join(dropped)})" if dropped else ""
            one(f"framework {current} -> {other}{without}", **{"layout.framework": other, **carried})
    compiled = point.get("layout.compile", base.layout.get("compile"))
    if not fw.compile and not compiled:
        one("torch.compile", **{"layout.compile": True})
    if pp > 1 and "zero-bubble" in fw.schedules and lay.get("schedule") not in ("zero-bubble", "dualpipe"):
        one("pipeline schedule -> zero-bubble", **{"layout.schedule": "zero-bubble"})
    return out


# The settings a stack offers beyond the layout's sizes (session 9), proposed only where the layout's stack runs them:
# each candidate is gated on what the model does not check itself (the stack family, a Blackwell GPU for the MXFP8
# fused MLP), then projected; one the model refuses for any reason but memory is not offered at all (layout
# validators: ParallelLayout, layout.resolve; the step's refusals: the framework's EP overlap, fp8 attention's GPU,
# Dist-MoE across NVLink domains).
_MEGATRON = frozenset({"megatron-core", "nemo"})  # Megatron-Core, and NeMo / Megatron-Bridge on it
# What Megatron-Bridge's 26.08 MXFP8 recipes set (moe_expert_rank_capacity_factor 1.5, v0.6.0 51885cf1 common.py)
STATIC_BUDGET = 1.5
_FULL_ITERATION = ["full_iteration"]
_MOE_GRAPHS = ["attn", "moe_router", "moe_preprocess"]  # the 26.04.01 MoE recipes' scope (Megatron-Bridge 21d102f5)


def _family(name: str) -> str:
    """The stack a framework profile belongs to (a release or mode profile names its stack in ``release_of``)."""
    from commlens.project.frameworks import framework

    return framework(name).release_of or name


def _setting_candidates(base: Base, point: Overrides, now: Projection) -> list[tuple[str, list[Variant]]]:
    """The stack's settings the layout leaves off, each one candidate (its variants: the best feasible stands):
    Megatron-Core's EP all-to-all overlap (with delayed weight gradients), fp8 attention (forward and backward, or
    forward only), NVFP4 on Blackwell, TE's fused grouped MLP with HybridEP's static budget and a whole-step graph,
    CUDA graph scopes,
    ZeRO-1/2 fp8 parameter gathers; torchtitan's deferred FSDP gradient reduction and Dist-MoE. Never the
    workload's ``mtp_layers`` (a different model, not a layout)."""
    from commlens.project.frameworks import framework, generation

    w, topo, _, fields = point_inputs(base, point)
    lay = layout_from(fields)
    fw, family = framework(lay.framework), _family(lay.framework)
    fp8, moe = w.precision == "fp8", w.moe is not None
    ep, micro_batches = int(now.layout["ep"]), int(now.layout["micro_batches"])  # type: ignore[call-overload]
    out: list[tuple[str, list[Variant]]] = []

    def add(*variants: tuple[str, dict[str, SpecValue]]) -> None:
        out.append((variants[0][0], [(label, {f"layout.{k}": v for k, v in d.items()}) for label, d in variants]))

    if moe and ep > 1 and fw.overlap.ep == "combined_1f1b":
        if not lay.moe_a2a_overlap:
            on: dict[str, SpecValue] = {"moe_a2a_overlap": True}
            both = {**on, "delay_wgrad_compute": True}
            variants = [("EP all-to-all overlap", on), ("EP all-to-all overlap + delayed wgrad", both)]
            if lay.pp > 1 and lay.vpp == 1:  # Megatron-Core pairs micro-batches only under the interleaved schedule
                variants += [(f"{label} (VPP 1 -> 2)", {**d, "vpp": 2}) for label, d in variants]
            add(*variants)
        elif not lay.delay_wgrad_compute:
            add(("delayed wgrad (EP overlap)", {"delay_wgrad_compute": True}))
    if family not in _MEGATRON:
        out += _torchtitan_candidates(lay, family, moe, ep, micro_batches)
        return out
    recipe = lay.fp8_recipe or fw.fp8_recipe
    if fp8 and lay.fp8_attention is None:
        add(
            ("fp8 attention (fwd+bwd)", {"fp8_attention": "fwd_bwd"}), ("fp8 attention (fwd)", {"fp8_attention": "fwd"})
        )
    blackwell = generation(topo.accelerator.name) == "blackwell"  # MXFP8: the model does not refuse it on Hopper
    if fp8 and blackwell and recipe != "nvfp4" and fw.nvfp4:  # TE's 4-bit recipe [27 s25 nvfp4]
        add(("NVFP4 (fp8_recipe nvfp4)", {"fp8_recipe": "nvfp4"}))
    if moe and fp8 and blackwell and (lay.fp8_recipe or fw.fp8_recipe) == "mxfp8":
        out += _fused_moe_candidates(lay)
    if not lay.cuda_graphs:
        if not moe:  # a whole-step graph of a dropless MoE model is refused (layout._check_graph_scope)
            add(("CUDA graphs (full iteration)", {"cuda_graphs": True, "cuda_graph_scope": _FULL_ITERATION}))
        else:  # its experts stay eager; a budgeted one's whole-step graph comes with the fused MLP above
            add(
                (
                    "CUDA graphs (attn, moe_router, moe_preprocess)",
                    {"cuda_graphs": True, "cuda_graph_scope": _MOE_GRAPHS},
                )
            )
    if fp8 and lay.zero in (1, 2) and int(now.layout["dp"]) > 1 and not lay.fp8_param_gather:  # type: ignore[call-overload]
        add(("fp8 parameter all-gather", {"fp8_param_gather": True}))
    return out


def _fused_moe_candidates(lay: ParallelLayout) -> list[tuple[str, list[Variant]]]:
    """TE's fused grouped MLP, HybridEP's static rank budget on it, and a whole-step CUDA graph of the MoE model the
    budget allows, as one candidate whose variants add them in that order (each needs the one before: layout
    ``_expert_capacity``, ``_check_graph_scope``); the budget only with the HybridEP dispatcher already chosen."""
    steps: list[tuple[str, dict[str, SpecValue]]] = []
    delta: dict[str, SpecValue] = {}
    if not lay.moe_fused_mlp:
        delta["moe_fused_mlp"] = True
        steps.append(("fused grouped MLP", dict(delta)))
    if lay.moe_dispatcher == "hybridep" and lay.moe_expert_capacity is None:
        delta["moe_expert_capacity"] = STATIC_BUDGET
        steps.append(((steps[-1][0] + " + " if steps else "") + f"budget {STATIC_BUDGET}", dict(delta)))
    if "moe_expert_capacity" in delta or lay.moe_expert_capacity is not None:
        if tuple(lay.cuda_graph_scope or ()) != ("full_iteration",):
            delta.update(cuda_graphs=True, cuda_graph_scope=_FULL_ITERATION)
            steps.append(((steps[-1][0] + " + " if steps else "") + "full-iteration graphs", dict(delta)))
    if not steps:
        return []
    return [(steps[0][0], [(label, {f"layout.{k}": v for k, v in d.items()}) for label, d in steps])]


def _torchtitan_candidates(
    lay: ParallelLayout, family: str, moe: bool, ep: int, micro_batches: int
) -> list[tuple[str, list[Variant]]]:
    """torchtitan's own settings: FSDP's deferred gradient reduction (its fsdp_defer_gradient_reduction: the
    parameters kept gathered from the first micro-batch, so reshard_after_forward off) and Dist-MoE experts."""
    if family != "torchtitan":
        return []
    out: list[tuple[str, list[Variant]]] = []
    if lay.zero == 3 and micro_batches > 1 and not lay.fsdp_defer_grad_reduce:
        label = "FSDP gradient reduction deferred to the last micro-batch"
        out.append((label, [(label, {"layout.fsdp_defer_grad_reduce": True, "layout.reshard_after_forward": False})]))
    if moe and ep > 1 and lay.moe_dispatcher != "distmoe":
        label = f"dispatcher {lay.moe_dispatcher} -> distmoe (Dist-MoE)"
        out.append((label, [(label, {"layout.moe_dispatcher": "distmoe"})]))
    return out


# What a layout's settings need from the stack it moves to: Megatron-Core's (and NeMo's) own, torchtitan's own.
_MEGATRON_ONLY = {
    "fp8_attention": (None, "fp8 attention"),
    "moe_fused_mlp": (False, "fused MLP"),
    "moe_expert_capacity": (None, "static expert budget"),
    "cuda_graph_scope": (None, "CUDA graph scope"),
    "fp8_param_gather": (False, "fp8 parameter gather"),
}


def _carry_over(fields: Overrides, other: str) -> tuple[dict[str, SpecValue], list[str]]:
    """The layout overrides that move the layout ``fields`` onto the stack ``other`` (the settings it lacks turned
    off) and the names of those dropped: Megatron-Core's EP overlap where ``other``'s profile has none, its fp8
    attention, fused MLP, static budget, graph scopes and fp8 parameter gathers off Megatron; torchtitan's deferred
    FSDP reduction and Dist-MoE (its own all-to-all in its place) off torchtitan."""
    from commlens.project.frameworks import framework

    family = _family(other)
    off: dict[str, SpecValue] = {}
    dropped: list[str] = []

    def drop(field: str, value: SpecValue, name: str) -> None:
        if fields.get(field) not in (None, False, value):
            off[f"layout.{field}"] = value
            dropped.append(name)

    if framework(other).overlap.ep != "combined_1f1b":
        drop("moe_a2a_overlap", False, "EP overlap")
        if fields.get("delay_wgrad_compute"):
            off["layout.delay_wgrad_compute"] = False
    if family not in _MEGATRON:
        for field, (value, name) in _MEGATRON_ONLY.items():
            drop(field, value, name)
        scope = fields.get("cuda_graph_scope")
        names = scope.replace("-", ",").split(",") if isinstance(scope, str) else list(scope or ())  # type: ignore[arg-type]
        if fields.get("cuda_graphs") and names and names != ["full_iteration"]:
            # without a scope, cuda_graphs captures every static kernel: more than the scoped graphs did, which
            # would credit the other stack with graphs the layout never had
            off["layout.cuda_graphs"] = False
            dropped[dropped.index("CUDA graph scope")] = "CUDA graphs"
    if family != "torchtitan":
        drop("fsdp_defer_grad_reduce", False, "deferred FSDP reduction")
    own = {"hybridep": family in _MEGATRON, "distmoe": family == "torchtitan"}  # HybridEP: Megatron's flex backend
    dispatcher = str(fields.get("moe_dispatcher"))
    if not own.get(dispatcher, True):
        # the other stack's own dispatch: DeepEP in AutoModel (its benchmark configs' DeepEP dispatch,
        # frameworks.yaml), its all-to-all elsewhere
        off["layout.moe_dispatcher"] = "deepep" if family == "automodel" else "alltoall"
        dropped.append({"hybridep": "HybridEP", "distmoe": "Dist-MoE"}[dispatcher])
    return off, dropped
