"""Error of the projection against published training runs (shared/reference/training-runs.md).

Megatron-LM SC'21 Table 1 (Narayanan et al., arXiv 2104.04473): GPT models on
Selene (DGX A100 80GB, 8 x 200 Gb/s HDR per node) -> preset ``dgx-a100``.
Each row is run as the paper ran it: bf16, s 2048, V 51200, full activation
recomputation, unfused attention, tensor parallelism without sequence
parallelism (added to Megatron-LM in 2022), the scatter/gather pipeline
send/recv, fp32 gradients all-reduced after the backward (no ZeRO, no overlap:
Megatron-LM of 2021), micro-batch 1, and the interleaved schedule with the
fewest virtual stages its layer count allows (the smallest divisor > 1 of the
layers per stage). Published figure: achieved hardware TFLOP/s per GPU,
counting FLOPs as 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).

No constant is fitted to these rows: peak, HBM and link figures come from the
presets, efficiencies from their documented origins.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MEGATRON_TABLE1", "ValidationRow", "megatron_flops", "validate_megatron"]

# (workload preset, TP, PP, GPUs, global batch, published TFLOP/s per GPU)
MEGATRON_TABLE1: tuple[tuple[str, int, int, int, int, float], ...] = (
    ("megatron-gpt-1.7b", 1, 1, 32, 512, 137.0),
    ("megatron-gpt-3.6b", 2, 1, 64, 512, 138.0),
    ("megatron-gpt-7.5b", 4, 1, 128, 512, 142.0),
    ("megatron-gpt-18.4b", 8, 1, 256, 1024, 135.0),
    ("megatron-gpt-39.1b", 8, 2, 512, 1536, 138.0),
    ("megatron-gpt-76.1b", 8, 4, 1024, 1792, 140.0),
    ("megatron-gpt-145.6b", 8, 8, 1536, 2304, 148.0),
    ("megatron-gpt-310.1b", 8, 16, 1920, 2160, 155.0),
    ("megatron-gpt-529.6b", 8, 35, 2520, 2520, 163.0),
    ("megatron-gpt-1t", 8, 64, 3072, 3072, 163.0),
)


@dataclass(frozen=True)
class ValidationRow:
    workload: str
    tp: int
    pp: int
    vpp: int
    gpus: int
    batch: int
    published_tflops: float
    predicted_tflops: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction (fraction)."""
        return self.predicted_tflops / self.published_tflops - 1.0

    def as_dict(self) -> dict[str, object]:
        return {"workload": self.workload, "tp": self.tp, "pp": self.pp, "vpp": self.vpp, "gpus": self.gpus,
                "batch": self.batch, "published_tflops_per_gpu": self.published_tflops,
                "predicted_tflops_per_gpu": self.predicted_tflops, "error": self.error}


def megatron_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """FLOPs of one iteration as the paper counts them (with recomputation's extra forward)."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def _vpp(layers_per_stage: int, pp: int) -> int:
    if pp == 1:
        return 1
    return next(v for v in range(2, layers_per_stage + 1) if layers_per_stage % v == 0) if layers_per_stage > 1 else 1


def validate_megatron(topology: str = "dgx-a100") -> list[ValidationRow]:
    """Predicted vs published TFLOP/s per GPU for every row of Megatron-LM SC'21 Table 1."""
    from commlens.project.layout import ParallelLayout
    from commlens.project.step import project
    from commlens.topology import load_topology
    from commlens.workload import load_workload

    topo = load_topology(topology)
    rows = []
    for name, tp, pp, gpus, batch, published in MEGATRON_TABLE1:
        w = load_workload(name, {"global_batch": batch, "micro_batch": 1})
        vpp = _vpp(w.layers // pp, pp)
        layout = ParallelLayout(tp=tp, pp=pp, vpp=vpp, sp=False, zero=0, recompute="full", flash_attention=False,
                                overlap_grad_reduce=False, grad_reduce_bytes=4)
        p = project(w, topo, layout, gpus)
        flops = megatron_flops(batch, w.seq_len, w.layers, w.hidden, w.vocab)
        rows.append(ValidationRow(name, tp, pp, vpp, gpus, batch, published, flops / p.step_time_s / gpus / 1e12))
    return rows
