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

from collections.abc import Mapping, Sequence
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


# --- published sets (src/commlens/project/published/*.yaml, format commlens.published/1)

PUBLISHED_FORMAT = "commlens.published/1"
SC21 = "megatron-sc21"
_METRICS = ("tflops_per_gpu", "mfu", "tokens_per_s_per_gpu", "step_time_s")
_ROW_KEYS = {"workload", "set", "gpus", "layout", "published", "note", "topology"}


@dataclass(frozen=True)
class SetRow:
    """One published run: the workload and layout as published, and its figure."""

    workload: str
    overrides: dict[str, object]
    gpus: int
    layout: dict[str, object]
    published: float
    topology: str
    note: str = ""


@dataclass(frozen=True)
class PublishedSet:
    """A published table of training runs (``published/NAME.yaml``)."""

    name: str
    title: str
    source: str
    metric: str  # tflops_per_gpu, mfu, tokens_per_s_per_gpu, step_time_s
    flops: str  # how the source counts FLOPs per token (for tflops_per_gpu / mfu): "6N+12lhs", "megatron96"
    peak_tflops: float | None
    rows: tuple[SetRow, ...]


@dataclass(frozen=True)
class SetResult:
    """Predicted against published for one row; ``error`` is on throughput (+: the model is optimistic)."""

    table: str
    workload: str
    topology: str
    gpus: int
    layout: str  # compact: tp8 cp1 pp16x1 ep1 dp64
    metric: str
    published: float
    predicted: float | None  # None: the model refused the layout
    refused: str = ""

    @property
    def error(self) -> float | None:
        if self.predicted is None:
            return None
        if self.metric == "step_time_s":
            return self.published / self.predicted - 1.0
        return self.predicted / self.published - 1.0

    def as_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "workload": self.workload,
            "topology": self.topology,
            "gpus": self.gpus,
            "layout": self.layout,
            "metric": self.metric,
            "published": self.published,
            "predicted": self.predicted,
            "error": self.error,
            "refused": self.refused or None,
        }


def _published_dir():
    from importlib.resources import files

    return files("commlens.project") / "published"


def table_names() -> list[str]:
    """Every validation table: Megatron-LM SC'21 Table 1 and the shipped published sets."""
    names = sorted(p.name.removesuffix(".yaml") for p in _published_dir().iterdir() if p.name.endswith(".yaml"))
    return [SC21, *(n for n in names if n != "memory")]


def load_set(name: str) -> PublishedSet:
    """A shipped published set by name; :class:`commlens.errors.CommlensError` naming what is wrong."""
    from commlens.errors import CommlensError
    from commlens.specdata import load_yaml

    path = _published_dir() / f"{name}.yaml"
    if not path.is_file():
        raise CommlensError(f"no published table {name!r} (have: {', '.join(table_names())})")
    data = load_yaml(path.read_text(encoding="utf-8"))
    where = f"published/{name}.yaml"
    if not isinstance(data, dict) or data.get("format") != PUBLISHED_FORMAT:
        raise CommlensError(f"{where}: format must be {PUBLISHED_FORMAT!r}")
    metric = data.get("metric")
    if metric not in _METRICS:
        raise CommlensError(f"{where}: metric must be one of {', '.join(_METRICS)}, got {metric!r}")
    flops = str(data.get("flops", "n/a"))
    if metric in ("tflops_per_gpu", "mfu") and flops not in _FLOPS_PER_TOKEN:
        raise CommlensError(f"{where}: flops {flops!r} is not one of {', '.join(_FLOPS_PER_TOKEN)}")
    rows = []
    for i, row in enumerate(data.get("rows") or []):
        if not isinstance(row, dict) or not _ROW_KEYS >= set(row) or not {"workload", "gpus", "published"} <= set(row):
            raise CommlensError(f"{where}: row {i + 1}: keys must be among {', '.join(sorted(_ROW_KEYS))}")
        rows.append(
            SetRow(
                workload=str(row["workload"]),
                overrides=dict(row.get("set") or {}),
                gpus=int(row["gpus"]),
                layout=dict(row.get("layout") or {}),
                published=float(row["published"]),
                topology=str(row.get("topology") or data["topology"]),
                note=str(row.get("note") or ""),
            )
        )
    peak = data.get("peak_tflops")
    return PublishedSet(
        name=str(data.get("name", name)),
        title=str(data.get("title", "")),
        source=str(data.get("source", "")),
        metric=metric,
        flops=flops,
        peak_tflops=None if peak is None else float(peak),
        rows=tuple(rows),
    )


def _flops_6n_12lhs(w) -> float:
    """PaLM's count per token: 6 N (N: active parameters) + 12 l h s (attention over the full sequence)."""
    return 6.0 * w.active_parameters + 12.0 * w.layers * w.heads * w.head_size * w.seq_len


def _flops_megatron96(w) -> float:
    return megatron_flops(1, w.seq_len, w.layers, w.hidden, w.vocab) / w.seq_len


_FLOPS_PER_TOKEN = {"6N+12lhs": _flops_6n_12lhs, "megatron96": _flops_megatron96}


def _compact(lay: Mapping[str, int]) -> str:
    return f"tp{lay['tp']} cp{lay['cp']} pp{lay['pp']}x{lay['vpp']} ep{lay['ep']} dp{lay['dp']}"


def validate_set(table: PublishedSet, accelerators: Sequence[str] | None = None) -> list[SetResult]:
    """Every row of ``table`` projected as published: predicted against published figure."""
    from commlens.errors import CommlensError
    from commlens.project.errors import InfeasibleLayoutError
    from commlens.project.layout import ParallelLayout
    from commlens.project.step import project
    from commlens.topology import load_topology
    from commlens.workload import load_workload

    out = []
    for row in table.rows:
        w = load_workload(row.workload, row.overrides)
        topo = load_topology(row.topology)
        try:
            layout = ParallelLayout.model_validate(row.layout)
        except ValueError as e:
            raise CommlensError(
                f"published/{table.name}.yaml: {row.workload} on {row.gpus} GPUs: layout: "
                f"{str(e).splitlines()[-1].strip()}"
            ) from None
        shown = {"tp": layout.tp, "cp": layout.cp, "pp": layout.pp, "vpp": layout.vpp, "ep": layout.ep}
        shown["dp"] = row.gpus // (layout.tp * layout.cp * layout.pp)
        try:
            p = project(w, topo, layout, row.gpus, accelerators=accelerators)
        except InfeasibleLayoutError as e:
            out.append(
                SetResult(
                    table.name,
                    row.workload,
                    row.topology,
                    row.gpus,
                    _compact(shown),
                    table.metric,
                    row.published,
                    None,
                    str(e),
                )
            )
            continue
        per_gpu_tokens = p.tokens_per_s / row.gpus
        if table.metric == "tokens_per_s_per_gpu":
            predicted = per_gpu_tokens
        elif table.metric == "step_time_s":
            predicted = p.step_time_s
        else:
            flops = _FLOPS_PER_TOKEN[table.flops](w) * per_gpu_tokens
            predicted = flops / 1e12 if table.metric == "tflops_per_gpu" else flops / (table.peak_tflops or 0) / 1e12
        out.append(
            SetResult(
                table.name,
                row.workload,
                row.topology,
                row.gpus,
                _compact(shown),
                table.metric,
                row.published,
                predicted,
            )
        )
    return out


def validate_tables(names: Sequence[str], accelerators: Sequence[str] | None = None) -> list[SetResult]:
    """Rows of the named tables (``SC21`` among them: Megatron-LM SC'21 Table 1), in order."""
    out: list[SetResult] = []
    for name in names:
        if name == SC21:
            for r in validate_megatron(accelerators=accelerators):
                lay = {"tp": r.tp, "cp": 1, "pp": r.pp, "vpp": r.vpp, "ep": 1, "dp": r.gpus // (r.tp * r.pp)}
                out.append(
                    SetResult(
                        SC21,
                        r.workload,
                        "dgx-a100",
                        r.gpus,
                        _compact(lay),
                        "tflops_per_gpu",
                        r.published_tflops,
                        r.predicted_tflops,
                    )
                )
        else:
            out.extend(validate_set(load_set(name), accelerators))
    return out
