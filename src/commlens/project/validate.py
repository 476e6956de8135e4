"""Error of the projection against published training runs (shared/reference/training-runs.md).

Megatron-LM SC'21 Table 1 (Narayanan et al., arXiv 2104.04473): GPT models on
Selene (DGX A100 80GB, 8 x 200 Gb/s HDR per node) -> preset ``dgx-a100``.
Each row is run as the paper's released scripts ran it (NVIDIA/Megatron-LM
``examples/sc21/run_table_1.sh`` and ``CONFIG.sh``, Megatron-LM of August
2021): fp16 (same 312 TFLOP/s peak as bf16), s 2048, V 51200, full activation
recomputation of every layer, unfused attention (fused causal softmax, s x s
scores through HBM), tensor parallelism without sequence parallelism (added in
2022), the scatter/gather pipeline send/recv, the row's micro-batch size and
virtual pipeline stages (``--num-layers-per-virtual-pipeline-stage``; the 39.1B
and 1T rows ran the plain 1F1B schedule), and gradients kept in fp16: each
micro-batch's weight gradients added into them by a separate kernel (no
gradient-accumulation fusion yet), all-reduced in fp16 after the last backward
by Megatron's local DDP (rows with PP) or during the backward by PyTorch DDP
(``DDP=torch``, rows without PP). Published figure: achieved hardware TFLOP/s
per GPU, counting FLOPs as 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).

No constant is fitted to these rows: peak, HBM and link figures come from the
presets, efficiencies from their documented origins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MEGATRON_TABLE1", "PublishedRun", "ValidationRow", "megatron_flops", "validate_megatron"]


@dataclass(frozen=True)
class PublishedRun:
    """One row of Table 1 with the settings its run used (run_table_1.sh)."""

    workload: str  # preset
    tp: int
    pp: int
    gpus: int
    batch: int  # global batch
    micro_batch: int  # MBS
    layers_per_virtual_stage: int | None  # --num-layers-per-virtual-pipeline-stage; None: plain 1F1B
    torch_ddp: bool  # DDP=torch: PyTorch DDP, all-reduce during the backward; False: Megatron local DDP, after it
    published_tflops: float  # achieved TFLOP/s per GPU

    @property
    def vpp(self) -> int:
        if self.layers_per_virtual_stage is None:
            return 1
        return self.layers_per_stage // self.layers_per_virtual_stage

    @property
    def layers_per_stage(self) -> int:
        from commlens.workload import load_workload

        return load_workload(self.workload).layers // self.pp


MEGATRON_TABLE1: tuple[PublishedRun, ...] = (
    PublishedRun("megatron-gpt-1.7b", 1, 1, 32, 512, 16, None, True, 137.0),
    PublishedRun("megatron-gpt-3.6b", 2, 1, 64, 512, 16, None, True, 138.0),
    PublishedRun("megatron-gpt-7.5b", 4, 1, 128, 512, 16, None, True, 142.0),
    PublishedRun("megatron-gpt-18.4b", 8, 1, 256, 1024, 8, None, True, 135.0),
    PublishedRun("megatron-gpt-39.1b", 8, 2, 512, 1536, 4, None, False, 138.0),
    PublishedRun("megatron-gpt-76.1b", 8, 4, 1024, 1792, 2, 5, False, 140.0),
    PublishedRun("megatron-gpt-145.6b", 8, 8, 1536, 2304, 2, 5, False, 148.0),
    PublishedRun("megatron-gpt-310.1b", 8, 16, 1920, 2160, 1, 3, False, 155.0),
    PublishedRun("megatron-gpt-529.6b", 8, 35, 2520, 2520, 1, 1, False, 163.0),
    PublishedRun("megatron-gpt-1t", 8, 64, 3072, 3072, 1, None, False, 163.0),
)


@dataclass(frozen=True)
class ValidationRow:
    workload: str
    tp: int
    pp: int
    vpp: int
    gpus: int
    batch: int
    micro_batch: int
    published_tflops: float
    predicted_tflops: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction (fraction)."""
        return self.predicted_tflops / self.published_tflops - 1.0

    def as_dict(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "tp": self.tp,
            "pp": self.pp,
            "vpp": self.vpp,
            "gpus": self.gpus,
            "batch": self.batch,
            "micro_batch": self.micro_batch,
            "published_tflops_per_gpu": self.published_tflops,
            "predicted_tflops_per_gpu": self.predicted_tflops,
            "error": self.error,
        }


def megatron_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """FLOPs of one iteration as the paper counts them (with recomputation's extra forward)."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def validate_megatron(topology: str = "dgx-a100", accelerators: Sequence[str] | None = None) -> list[ValidationRow]:
    """Predicted vs published TFLOP/s per GPU for every row of Megatron-LM SC'21 Table 1 (``accelerators``:
    accelerators files over the shipped figures, default ``COMMLENS_ACCELERATORS``)."""
    from commlens.project.layout import ParallelLayout
    from commlens.project.step import project
    from commlens.topology import load_topology
    from commlens.workload import load_workload

    topo = load_topology(topology)
    rows = []
    for run in MEGATRON_TABLE1:
        w = load_workload(run.workload, {"global_batch": run.batch, "micro_batch": run.micro_batch})
        layout = ParallelLayout(
            tp=run.tp,
            pp=run.pp,
            vpp=run.vpp,
            sp=False,
            zero=0,
            recompute="full",
            flash_attention=False,
            overlap_grad_reduce=run.torch_ddp,
            grad_reduce_bytes=2,
            grad_accum_fusion=False,
        )
        p = project(w, topo, layout, run.gpus, accelerators=accelerators)
        flops = megatron_flops(run.batch, w.seq_len, w.layers, w.hidden, w.vocab)
        rows.append(
            ValidationRow(
                run.workload,
                run.tp,
                run.pp,
                run.vpp,
                run.gpus,
                run.batch,
                run.micro_batch,
                run.published_tflops,
                flops / p.step_time_s / run.gpus / 1e12,
            )
        )
    return rows
