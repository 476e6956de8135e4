"""What would help most: single changes to one projection, each projected by the model itself.

:func:`explore` takes a projected point and tries one change at a time, the
same job throughout (GPU count and global batch fixed):

1. the candidates, from the point's own layout, workload and topology: TP x2
   and /2, PP x2 and /2, CP x2, VPP x2 (PP > 1), half the micro-batch (twice
   the micro-batches), one step less recomputation, every other ZeRO stage
   (when there is data parallelism), the next bigger scale-up domain (72,
   NVL72-class, alone and with TP doubled inside it: the faster counts), NICs
   x2, fp8 (for bf16), the layout on each other framework (NeMo counts as Megatron-Core), torch.compile where the
   stack does not compile, and the zero-bubble schedule where the stack has it;
2. each one projected with :func:`commlens.project.sweep.project_point`; one
   the model refuses (:class:`InfeasibleLayoutError`: memory, divisibility,
   placement; :class:`ProjectionError`: what the hardware lacks, as fp8 on an
   A100) is kept with its reason;
3. the gain of each change: old step time / new step time - 1; those above
   :data:`MIN_GAIN`, largest first, make the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commlens.project.errors import InfeasibleLayoutError, ProjectionError
from commlens.project.sweep import SCALE_UP_DOMAIN, Overrides, point_inputs, project_point
from commlens.specdata import SpecValue

if TYPE_CHECKING:
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

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "point": dict(self.point),
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "gain": self.gain,
            "memory_bytes_per_gpu": self.memory_bytes_per_gpu,
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
    candidates = _candidates(base, point, now)
    for _, variants in candidates:
        best: Change | None = None
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
        if best is not None:
            if best.gain > MIN_GAIN:
                changes.append(best)
        elif refusal is not None:
            refused.append(refusal)
    changes.sort(key=lambda c: c.gain, reverse=True)
    order = {label: i for i, (label, _) in enumerate(candidates)}
    refused.sort(key=lambda r: (_REFUSAL_ORDER.get(r.kind, len(_REFUSAL_ORDER)), order.get(r.label, 0)))
    return WhatIf(tuple(changes[:top]), tuple(refused), len(candidates))


Variant = tuple[str, Overrides]  # (label, the overrides it adds to the point)


def _candidates(base: Base, point: Overrides, now: Projection) -> list[tuple[str, list[Variant]]]:
    """Every candidate change: (label, its variants); a candidate's best feasible variant stands for it."""
    w, topo, _, _ = point_inputs(base, point)
    lay = now.layout
    tp, pp, cp, vpp, zero = (int(lay[k]) for k in ("tp", "pp", "cp", "vpp", "zero"))  # type: ignore[call-overload]
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
    for other in framework_names():
        # NeMo runs Megatron-Core; a past release's profile (nemo-24.03) describes published runs, not a choice
        if other != current and {other, current} != {"nemo", "megatron-core"} and not framework(other).release_of:
            one(f"framework {current} -> {other}", **{"layout.framework": other})
    compiled = point.get("layout.compile", base.layout.get("compile"))
    if not fw.compile and not compiled:
        one("torch.compile", **{"layout.compile": True})
    if pp > 1 and "zero-bubble" in fw.schedules and lay.get("schedule") not in ("zero-bubble", "dualpipe"):
        one("pipeline schedule -> zero-bubble", **{"layout.schedule": "zero-bubble"})
    return out
