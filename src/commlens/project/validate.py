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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from importlib.abc import Traversable

    from commlens.project.bands import Residual

__all__ = [
    "ABPair",
    "MEGATRON_TABLE1",
    "MEMORY",
    "MemoryFigure",
    "MemoryResult",
    "PublishedRun",
    "PublishedSet",
    "SetResult",
    "ValidationRow",
    "ab_pairs",
    "load_memory_figures",
    "load_set",
    "load_table_file",
    "load_user_file",
    "megatron_flops",
    "other_pair_lines",
    "set_pairs",
    "shipped_band_coverage",
    "table_names",
    "validate_megatron",
    "validate_memory",
    "validate_set",
    "validate_tables",
]


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
    from commlens.project import step
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.topology import load_topology
    from commlens.workload import load_workload

    files = None if accelerators is None else tuple(accelerators)
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
        p = step.run(Scenario(w, topo, layout, run.gpus, accelerators=files))
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
MEMORY = "memory"  # published/memory.yaml: GPU-memory figures, validated by validate_memory
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
    file: str = ""  # how errors name the file: published/NAME.yaml for a shipped table, else its path


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
    family: tuple[str, str, str, str] | None = None  # commlens.project.bands.family_of the row
    in_band: bool | None = None  # published within the 80% band fitted without this row (band_coverage)

    @property
    def log_ratio(self) -> float | None:
        """log(published step / projected step): the residual the error bands are fitted on."""
        return None if self.error is None else math.log1p(self.error)

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
            "family": " x ".join(self.family) if self.family else None,
            "in_band": self.in_band,
        }


def residuals(rows: Sequence[SetResult]) -> list[Residual]:
    """The projected rows' residuals by family, for ``commlens.project.bands``."""
    from commlens.project.bands import Residual

    return [
        Residual(r.family, r.log_ratio, f"{r.table} {r.workload} {r.gpus}")
        for r in rows
        if r.family is not None and r.log_ratio is not None
    ]


class BandCoverage(TypedDict):
    """How many projected rows' published figures fall in their family's 80% band."""

    rows: int  # rows judged (with a family and a residual)
    covered: int
    coverage: float | None  # covered / rows; None when no row was judged
    fit: str  # the band's fit: "leave-one-out" (the published tables) or "shipped" (a table of one's own runs)


def band_coverage(rows: Sequence[SetResult]) -> tuple[list[SetResult], BandCoverage]:
    """Each projected row's published figure against the 80% band of its family fitted on the other rows
    (leave one out); the rows with ``in_band`` set, and the coverage (target: 70% to 90%)."""
    from dataclasses import replace

    from commlens.project.bands import band

    all_res = residuals(rows)
    out: list[SetResult] = []
    covered = judged = 0
    for i, r in enumerate(rows):
        if r.family is None or r.log_ratio is None:
            out.append(r)
            continue
        own = _index(rows, i)
        others = [x for j, x in enumerate(all_res) if j != own]
        b = band(1.0, r.family, others)
        inside = None if b is None else b.low_s <= math.exp(r.log_ratio) <= b.high_s
        if inside is not None:
            judged += 1
            covered += inside
        out.append(replace(r, in_band=inside))
    coverage = covered / judged if judged else None
    return out, {"rows": judged, "covered": covered, "coverage": coverage, "fit": "leave-one-out"}


def shipped_band_coverage(rows: Sequence[SetResult]) -> tuple[list[SetResult], BandCoverage]:
    """Each projected row's published figure against the 80% band a projection of it prints: its family's band from
    the shipped residuals (``bands.yaml``, fitted on the published tables), as for a table of one's own runs, none
    of whose rows are in that fit; the rows with ``in_band`` set, and the coverage."""
    from dataclasses import replace

    from commlens.project.bands import band

    out: list[SetResult] = []
    covered = judged = 0
    for r in rows:
        b = None if r.family is None or r.log_ratio is None else band(1.0, r.family)
        if b is None or r.log_ratio is None:
            out.append(r)
            continue
        inside = b.low_s <= math.exp(r.log_ratio) <= b.high_s
        judged += 1
        covered += inside
        out.append(replace(r, in_band=inside))
    return out, {"rows": judged, "covered": covered, "coverage": covered / judged if judged else None, "fit": "shipped"}


def _index(rows: Sequence[SetResult], i: int) -> int:
    """Position of row ``i`` among the rows that have a residual."""
    return sum(1 for r in rows[:i] if r.family is not None and r.log_ratio is not None)


def _published_dir(directory: Path | None = None) -> Traversable:
    from importlib.resources import files

    return directory if directory is not None else files("commlens.project") / "published"


def _where(name: str, directory: Path | None) -> str:
    """How errors name a set's file: ``published/NAME.yaml`` for the shipped ones, the path otherwise."""
    return f"published/{name}.yaml" if directory is None else str(directory / f"{name}.yaml")


def table_names(directory: Path | None = None) -> list[str]:
    """Every validation table: Megatron-LM SC'21 Table 1, the published throughput sets, then ``memory``
    (``directory``: where the sets are, default the shipped package data)."""
    names = sorted(
        p.name.removesuffix(".yaml") for p in _published_dir(directory).iterdir() if p.name.endswith(".yaml")
    )
    return [SC21, *(n for n in names if n != MEMORY), *([MEMORY] if MEMORY in names else [])]


def _number(value: object, where: str, what: str, *, integer: bool = False) -> float:
    """A finite, positive number from a YAML value; :class:`CommlensError` naming ``what`` otherwise."""
    from commlens.errors import CommlensError

    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number) and number > 0 and (number.is_integer() or not integer):
            return number
    kind = "a positive integer" if integer else "a finite positive number"
    raise CommlensError(f"{where}: {what} must be {kind}, got {value!r}")


def _row_keys(row: object, allowed: set[str], required: set[str], where: str) -> dict:
    from commlens.errors import CommlensError

    if not isinstance(row, dict):
        raise CommlensError(f"{where}: must be a mapping, got {type(row).__name__}")
    unknown = sorted(set(row) - allowed)
    if unknown:
        raise CommlensError(f"{where}: unknown key {', '.join(map(str, unknown))} (keys: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(row))
    if missing:
        raise CommlensError(f"{where}: missing {', '.join(missing)}")
    return row


def load_set(name: str, directory: Path | None = None) -> PublishedSet:
    """A published set by name (``directory``: where the sets are, default the shipped package data);
    :class:`commlens.errors.CommlensError` naming the file and what is wrong."""
    from commlens.errors import CommlensError
    from commlens.specdata import load_yaml

    path = _published_dir(directory) / f"{name}.yaml"
    if name == MEMORY or not path.is_file():
        raise CommlensError(f"no published table {name!r} (have: {', '.join(table_names(directory))})")
    where = _where(name, directory)
    try:
        data = load_yaml(path.read_text(encoding="utf-8"), shipped=directory is None)
    except Exception as e:  # yaml.YAMLError, DuplicateKeyError
        raise CommlensError(f"{where}: {e}") from None
    return _parse_set(data, name, where)


# a table file of one's own runs is read whole; one far larger than any published table is refused unread
MAX_TABLE_FILE_BYTES = 16 * 1024 * 1024


def load_table_file(path: str | Path) -> PublishedSet:
    """A table of one's own runs in the published tables' format (``commlens.published/1``), from ``path``;
    :class:`commlens.errors.CommlensError` naming the file and what is wrong (exit 2)."""
    return _parse_set(_read_user_yaml(path), Path(path).stem, str(path))


def load_user_file(path: str | Path) -> PublishedSet | list[MemoryFigure]:
    """A file of one's own runs, read once and taken by its format: a table (``commlens.published/1``, as
    :func:`load_table_file`) or memory figures (``commlens.published-memory/1``, at least one);
    :class:`commlens.errors.CommlensError` naming the file and what is wrong (exit 2)."""
    data = _read_user_yaml(path)
    if isinstance(data, dict) and data.get("format") == MEMORY_FORMAT:
        return _parse_memory(data, str(path), require=True)
    return _parse_set(data, Path(path).stem, str(path))


def _read_user_yaml(path: str | Path) -> object:
    """The YAML data of a file of one's own (at most :data:`MAX_TABLE_FILE_BYTES`, UTF-8);
    :class:`commlens.errors.CommlensError` naming the file and what is wrong."""
    from commlens.errors import CommlensError
    from commlens.files import read_at_most
    from commlens.specdata import load_yaml

    p = Path(path)
    where = str(path)
    if not p.is_file():
        raise CommlensError(f"{where}: no such file")
    try:
        with p.open("rb") as fp:
            raw = read_at_most(fp, MAX_TABLE_FILE_BYTES + 1)
    except OSError as e:
        raise CommlensError(f"{where}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_TABLE_FILE_BYTES:
        raise CommlensError(f"{where}: larger than {MAX_TABLE_FILE_BYTES // (1024 * 1024)} MiB; not a table of runs")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CommlensError(f"{where}: not UTF-8 text (byte {e.start})") from None
    try:
        return load_yaml(text)
    except Exception as e:  # yaml.YAMLError, DuplicateKeyError
        raise CommlensError(f"{where}: not valid YAML: {e}") from None


def _parse_set(data: object, name: str, where: str) -> PublishedSet:
    """A published set from its YAML ``data`` (``where`` names the file in errors)."""
    from commlens.errors import CommlensError

    if not isinstance(data, dict) or data.get("format") != PUBLISHED_FORMAT:
        raise CommlensError(f"{where}: format must be {PUBLISHED_FORMAT!r}")
    metric = data.get("metric")
    if metric not in _METRICS:
        raise CommlensError(f"{where}: metric must be one of {', '.join(_METRICS)}, got {metric!r}")
    flops = str(data.get("flops", "n/a"))
    if metric in ("tflops_per_gpu", "mfu") and flops not in _FLOPS_PER_TOKEN:
        raise CommlensError(f"{where}: flops {flops!r} is not one of {', '.join(_FLOPS_PER_TOKEN)}")
    peak = data.get("peak_tflops")
    if metric == "mfu" and peak is None:
        raise CommlensError(f"{where}: metric mfu needs peak_tflops")
    raw_rows = data.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise CommlensError(f"{where}: rows must be a non-empty list of runs")
    rows = []
    for i, raw in enumerate(raw_rows):
        at = f"{where}: row {i + 1}"
        row = _row_keys(raw, _ROW_KEYS, {"workload", "gpus", "published"}, at)
        if "topology" not in row and "topology" not in data:
            raise CommlensError(f"{at}: no topology (neither the row's nor the file's)")
        for key in ("set", "layout"):
            if not isinstance(row.get(key) or {}, dict):
                raise CommlensError(f"{at}: {key} must be a mapping, got {type(row[key]).__name__}")
        rows.append(
            SetRow(
                workload=str(row["workload"]),
                overrides=dict(row.get("set") or {}),
                gpus=int(_number(row["gpus"], at, "gpus", integer=True)),
                layout=dict(row.get("layout") or {}),
                published=_number(row["published"], at, "published"),
                topology=str(row.get("topology") or data["topology"]),
                note=str(row.get("note") or ""),
            )
        )
    return PublishedSet(
        name=str(data.get("name", name)),
        title=str(data.get("title", "")),
        source=str(data.get("source", "")),
        metric=metric,
        flops=flops,
        peak_tflops=None if peak is None else _number(peak, where, "peak_tflops"),
        rows=tuple(rows),
        file=where,
    )


def _flops_6n_12lhs(w) -> float:
    """PaLM's count per token: 6 N (N: active parameters) + 12 l h s (attention over the full sequence)."""
    return 6.0 * w.active_parameters + 12.0 * w.layers * w.heads * w.head_size * w.seq_len


def _flops_megatron96(w) -> float:
    return megatron_flops(1, w.seq_len, w.layers, w.hidden, w.vocab) / w.seq_len


def _flops_6n_6lhs(w) -> float:
    """The causal count: attention over half the sequence on average (Megatron-LM counts so since 8873b55,
    2025-03-06; Meta's MFU for Llama3 405B in Yang et al., MLSys 2025, arXiv 2411.01783v3 Appendix A: attention
    "1/2 x 4 x B x T^2 x D x #layers, where 1/2 is from the causal mask", forward only, x3 for training).
    torchtitan does not: its MFU counts 6 N + 12 l h s, "do not account for sparsity in causal attention"
    (torchtitan/utils.py 40f79d79f, 2024-07-30; torchtitan/models/utils.py at b5bcd76c6, 2026-08-21)."""
    return 6.0 * w.active_parameters + 6.0 * w.layers * w.heads * w.head_size * w.seq_len


def _flops_nemo(w) -> float:
    """NeMo's performance pages (NVIDIA/NeMo f0bf77bcf7 nemo/utils/flops_formulas.py, llama2/llama3): 6 x the matmul
    weights (the output layer once, the input embedding not) + 12 l h s (attention over the full sequence).
    It reproduces NeMo-Framework-Launcher 24.03.01's examples/README.md Llama 2 rows (7B 15066 tokens/s -> 694,
    13B 7728 -> 674, 70B 1594 -> 708 TFLOP/s) and the NeMo 24.07 summary page's (7B 16634 -> 767)."""
    width = w.heads * w.head_size
    attn = 2 * w.hidden * width + 2 * w.hidden * w.kv_heads_n * w.head_size
    ffn = (3 if w.gated_ffn else 2) * w.hidden * w.ffn_hidden
    return 6.0 * (w.layers * (attn + ffn) + w.hidden * w.vocab) + 12.0 * w.layers * width * w.seq_len


_FLOPS_PER_TOKEN = {
    "6N+12lhs": _flops_6n_12lhs,
    "6N+6lhs": _flops_6n_6lhs,
    "megatron96": _flops_megatron96,
    "nemo": _flops_nemo,
}


def _compact(lay: Mapping[str, int]) -> str:
    return f"tp{lay['tp']} cp{lay['cp']} pp{lay['pp']}x{lay['vpp']} ep{lay['ep']} dp{lay['dp']}"


def validate_set(table: PublishedSet, accelerators: Sequence[str] | None = None) -> list[SetResult]:
    """Every row of ``table`` projected as published: predicted against published figure."""
    from commlens.errors import CommlensError
    from commlens.project.bands import family_of
    from commlens.project.errors import InfeasibleLayoutError
    from commlens.project.frameworks import framework
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.project.step import run
    from commlens.topology import load_topology
    from commlens.workload import load_workload

    files = None if accelerators is None else tuple(accelerators)
    label = table.file or f"published/{table.name}.yaml"
    out = []
    for i, row in enumerate(table.rows):
        try:
            w = load_workload(row.workload, row.overrides)
            topo = load_topology(row.topology)
        except CommlensError as e:
            raise CommlensError(f"{label}: row {i + 1}: {e}") from None
        try:
            layout = ParallelLayout.model_validate(row.layout)
        except ValueError as e:
            raise CommlensError(
                f"{label}: {row.workload} on {row.gpus} GPUs: layout: {str(e).splitlines()[-1].strip()}"
            ) from None
        shown = {"tp": layout.tp, "cp": layout.cp, "pp": layout.pp, "vpp": layout.vpp, "ep": layout.ep}
        shown["dp"] = row.gpus // (layout.tp * layout.cp * layout.pp)
        # an fp8 row names its recipe (delayed, current, mxfp8, nvfp4): rows of one table and layout differ by it
        recipe = f" {layout.fp8_recipe or framework(layout.framework).fp8_recipe}" if w.precision == "fp8" else ""
        if layout.optimizer != "adam":  # [27 s26 muon] and a row's optimizer where it is not Adam
            recipe += f" {layout.optimizer}"
        predicted: float | None = None
        refused = ""
        try:
            p = run(Scenario(w, topo, layout, row.gpus, accelerators=files))
        except InfeasibleLayoutError as e:
            refused = str(e)
        else:
            per_gpu_tokens = p.tokens_per_s / row.gpus
            if table.metric == "tokens_per_s_per_gpu":
                predicted = per_gpu_tokens
            elif table.metric == "step_time_s":
                predicted = p.step_time_s
            else:
                flops = _FLOPS_PER_TOKEN[table.flops](w) * per_gpu_tokens / 1e12
                predicted = flops if table.metric == "tflops_per_gpu" else flops / (table.peak_tflops or 0)
        out.append(
            SetResult(
                table.name,
                row.workload,
                row.topology,
                row.gpus,
                _compact(shown) + recipe,
                table.metric,
                row.published,
                predicted,
                refused,
                family_of(topo.accelerator.name, layout.framework, w.moe is not None, w.seq_len),
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
                        family=("ampere", "megatron-core", "dense", "short"),
                    )
                )
        else:
            out.extend(validate_set(load_set(name), accelerators))
    return out


# --- one change at a time: the published A/B pairs [27 s21 abpairs]


@dataclass(frozen=True)
class ABPair:
    """Two published runs of one table that differ in one setting: the gain it brought, published and projected.

    ``gain`` is throughput after / before - 1 (step before / step after - 1 for step-time tables), so the model's
    ``modelled_gain`` is what the what-if would print for that change at that point. ``kind``: ``setting`` (a layout
    or workload field a user would change), ``release`` (the same stack's profile of another release: the model prices
    the releases alike where no source says how they differ), ``batch`` (the global batch: a throughput identity) or
    ``unstated`` (a field that differs in the rows but not in what the model projects: one row's setting stands in for
    one the layout cannot state, as torchtitan's 'selective layer' checkpointing, so the model makes no claim).
    """

    table: str
    workload: str
    topology: str
    gpus: int
    field: str  # layout.NAME or set.NAME
    before: object
    after: object
    published_gain: float
    modelled_gain: float
    kind: str

    @property
    def difference(self) -> float:
        """Projected gain - published gain (+: the model promises more than the runs gave)."""
        return self.modelled_gain - self.published_gain

    @property
    def change(self) -> str:
        """The change as a line shows it: ``layout.tp_comm_overlap: False -> True`` (an unset field: ``default``)."""

        def shown(value: object) -> str:
            if value is None:
                return "default"
            if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
                return f"{value:,.0f}"
            return str(value)

        return f"{self.field}: {shown(self.before)} -> {shown(self.after)}"


_OTHER_PAIRS = (
    ("release", "another release of the same stack (layout.framework)"),
    ("batch", "another global batch"),
    ("unstated", "a setting the layout cannot state (the rows project alike)"),
)


def other_pair_lines(pairs: Sequence[ABPair]) -> list[str]:
    """One line for each kind of pair but ``setting``: how many, the published gains, how far the model is off."""
    lines = []
    for kind, what in _OTHER_PAIRS:
        some = [p for p in pairs if p.kind == kind]
        if some:
            low, high = min(p.published_gain for p in some), max(p.published_gain for p in some)
            mean = sum(abs(p.difference) for p in some) / len(some)
            span = f"{100 * low:+.1f}%" + (f" to {100 * high:+.1f}%" if len(some) > 1 else "")
            lines.append(
                f"{len(some)} pair{'s' if len(some) > 1 else ''} at {what}: published {span}, the model off by "
                f"{100 * mean:.1f} points{' on average' if len(some) > 1 else ''}"
            )
    return lines


def _fields(row: SetRow) -> dict[str, object]:
    return {**{f"set.{k}": v for k, v in row.overrides.items()}, **{f"layout.{k}": v for k, v in row.layout.items()}}


def _stack(name: str) -> str:
    """The stack a framework profile is a release of, for A/B pairs: a release profile's ``release_of``; NeMo /
    Megatron-Bridge's current profile ``nemo`` is Megatron-Core underneath (frameworks.yaml: its profile is
    megatron-core's, ``same_as``), so a table that spans Megatron-Bridge releases (the Nemotron 3 Nano rows, 26.02.01
    on megatron-core-26.02, 26.04 on nemo) pairs them as releases of one stack."""
    from commlens.project.frameworks import framework

    stack = framework(name).release_of or name
    return "megatron-core" if stack == "nemo" else stack


def ab_pairs(
    names: Sequence[str], accelerators: Sequence[str] | None = None, results: Sequence[SetResult] = ()
) -> list[ABPair]:
    """Every pair of rows of one table (same workload, topology and GPU count) whose settings differ in exactly one
    field, in table order; rows the model refuses are left out. ``results``: the tables' rows as
    :func:`validate_tables` gave them, where the caller has them (else each table is projected here)."""
    done: dict[str, list[SetResult]] = {}
    for r in results:
        done.setdefault(r.table, []).append(r)
    out: list[ABPair] = []
    for name in names:
        if name in (SC21, MEMORY):
            continue
        table = load_set(name)
        projected = done.get(name)
        if projected is None or len(projected) != len(table.rows):
            projected = validate_set(table, accelerators)
        out += set_pairs(table, projected)
    return out


def set_pairs(table: PublishedSet, projected: Sequence[SetResult]) -> list[ABPair]:
    """The A/B pairs of one table (a published one or a file of one's own runs) from its rows' projections
    (:func:`validate_set`), in table order."""

    name = table.name
    out: list[ABPair] = []
    rows = list(zip(table.rows, projected, strict=True))
    for i, (a, ra) in enumerate(rows):
        for b, rb in rows[i + 1 :]:
            if (a.workload, a.topology, a.gpus) != (b.workload, b.topology, b.gpus):
                continue
            if ra.predicted is None or rb.predicted is None:
                continue
            fa, fb = _fields(a), _fields(b)
            changed = [k for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
            if len(changed) != 1:
                continue
            field = changed[0]
            kind = "setting"
            if field == "set.global_batch":
                kind = "batch"
            elif field == "layout.framework":
                stacks = {_stack(str(x)) for x in (fa.get(field), fb.get(field))}
                kind = "release" if len(stacks) == 1 else "setting"
            if table.metric == "step_time_s":
                published, modelled = a.published / b.published, ra.predicted / rb.predicted
            else:
                published, modelled = b.published / a.published, rb.predicted / ra.predicted
            if kind == "setting" and modelled == 1.0:
                kind = "unstated"
            out.append(
                ABPair(
                    name,
                    a.workload,
                    a.topology,
                    a.gpus,
                    field,
                    fa.get(field),
                    fb.get(field),
                    published - 1.0,
                    modelled - 1.0,
                    kind,
                )
            )
    return out


# --- published memory figures (published/memory.yaml, format commlens.published-memory/1)

MEMORY_FORMAT = "commlens.published-memory/1"
_MEASURES = (
    "activations_per_layer",
    "activations",
    "model_states",
    "peak_reserved",
    "weights_and_gradients",  # [27 s11 memrep] the 16-bit weights and the main-grad buffer of the stage
    "optimizer_states",  # [27 s11 memrep] fp32 main weights and Adam moments, as the stage shards them
)
_STAGES = ("first", "last", "any")
_KINDS = ("printed", "formula", "bound")
_FIGURE_KEYS = {"name", "source", "workload", "set", "gpus", "layout", "measures", "stage", "published_bytes", "note"}
_PER_NODE = 8  # GPUs per node for resolve(): the figures' systems are 8-GPU nodes; memory does not depend on it


@dataclass(frozen=True)
class MemoryFigure:
    """One published memory figure per GPU: the workload and layout it is for, what it measures, its bytes."""

    name: str
    source: str
    workload: str
    overrides: dict[str, object]
    gpus: int
    layout: dict[str, object]
    measures: str  # activations_per_layer, activations, model_states, peak_reserved, weights_and_gradients, ...
    stage: str  # first, last, any (the largest over stages), or a pipeline rank ("1")
    published_bytes: float
    kind: str  # printed, formula, bound (the run fit: an upper bound on the peak)
    note: str


@dataclass(frozen=True)
class MemoryResult:
    """The model's bytes for a figure; ``error`` for printed/formula figures, ``fits`` for bounds."""

    name: str
    measures: str
    stage: str
    kind: str
    published_bytes: float
    predicted_bytes: float | None  # None: the model refused the layout
    refused: str = ""

    @property
    def error(self) -> float | None:
        """Signed relative error (+: the model predicts more memory); None for bounds and refusals."""
        if self.predicted_bytes is None or self.kind == "bound":
            return None
        return self.predicted_bytes / self.published_bytes - 1.0

    @property
    def fits(self) -> bool | None:
        """For a bound: the predicted peak is within it, up to the memory model's stated error (``MEMORY_TOLERANCE``,
        as the projection refuses only beyond it); None otherwise."""
        from commlens.project.memory import MEMORY_TOLERANCE

        if self.kind != "bound":
            return None
        return self.predicted_bytes is not None and self.predicted_bytes <= self.published_bytes * (
            1 + MEMORY_TOLERANCE
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "measures": self.measures,
            "stage": self.stage,
            "kind": self.kind,
            "published_bytes": self.published_bytes,
            "predicted_bytes": self.predicted_bytes,
            "error": self.error,
            "fits": self.fits,
            "refused": self.refused or None,
        }


def load_memory_figures(directory: Path | None = None) -> list[MemoryFigure]:
    """The figures of ``memory.yaml`` (``directory``: where it is, default the shipped package data);
    :class:`commlens.errors.CommlensError` naming the file, the figure and what is wrong."""
    from commlens.errors import CommlensError
    from commlens.specdata import load_yaml

    where = _where(MEMORY, directory)
    path = _published_dir(directory) / f"{MEMORY}.yaml"
    if not path.is_file():
        raise CommlensError(f"{where}: no such file")
    try:
        data = load_yaml(path.read_text(encoding="utf-8"), shipped=directory is None)
    except Exception as e:  # yaml.YAMLError, DuplicateKeyError
        raise CommlensError(f"{where}: {e}") from None
    return _parse_memory(data, where)


def _parse_memory(data: object, where: str, require: bool = False) -> list[MemoryFigure]:
    """The figures of a memory file's YAML ``data`` (``where`` names the file in errors; ``require``: at least one,
    as a file of one's own must have)."""
    from commlens.errors import CommlensError

    if not isinstance(data, dict) or data.get("format") != MEMORY_FORMAT:
        raise CommlensError(f"{where}: format must be {MEMORY_FORMAT!r}")
    raw_figures = data.get("figures") or []
    if not isinstance(raw_figures, list) or (require and not raw_figures):
        raise CommlensError(f"{where}: figures must be a non-empty list")
    out = []
    for i, raw in enumerate(raw_figures):
        at = f"{where}: figure {i + 1}"
        fig = _row_keys(raw, _FIGURE_KEYS, _FIGURE_KEYS - {"set", "source"}, at)
        for key in ("set", "layout"):
            if not isinstance(fig.get(key) or {}, dict):
                raise CommlensError(f"{at}: {key} must be a mapping, got {type(fig[key]).__name__}")
        at = f"{where}: {fig['name']}"
        if fig["measures"] not in _MEASURES:
            raise CommlensError(f"{at}: measures must be one of {', '.join(_MEASURES)}, got {fig['measures']!r}")
        rank = fig["stage"]  # [27 s11 memrep] a pipeline rank where the source gives one rank that is neither end
        if fig["stage"] not in _STAGES and not (isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0):
            raise CommlensError(
                f"{at}: stage must be one of {', '.join(_STAGES)} or a pipeline rank (0, 1, ...), got {fig['stage']!r}"
            )
        kind = str(fig["note"]).split(":", 1)[0]
        if kind not in _KINDS:
            raise CommlensError(f"{at}: note must start with one of {', '.join(k + ':' for k in _KINDS)}")
        if kind == "bound" and fig["measures"] != "peak_reserved":
            raise CommlensError(f"{at}: a bound is a peak_reserved figure (the run fit in the device)")
        out.append(
            MemoryFigure(
                name=str(fig["name"]),
                source=str(fig.get("source") or ""),
                workload=str(fig["workload"]),
                overrides=dict(fig.get("set") or {}),
                gpus=int(_number(fig["gpus"], at, "gpus", integer=True)),
                layout=dict(fig["layout"] or {}),
                measures=fig["measures"],
                stage=str(fig["stage"]),
                published_bytes=_number(fig["published_bytes"], at, "published_bytes"),
                kind=kind,
                note=str(fig["note"]),
            )
        )
    return out


def _predicted_bytes(fig: MemoryFigure) -> float:
    """The model's figure (``commlens.project.memory``); :class:`InfeasibleLayoutError` when it cannot resolve.

    1. activations_per_layer: one layer's activations for one micro-batch (micro_batch x seq_len / CP tokens),
       as ``stage_memory`` keeps them: the layer input alone under full recomputation, else
       ``activation_bytes_per_token`` (selective recomputation already drops the attention core);
    2. activations: ``stage_memory``'s activations of the stage (first, last, the largest, or one pipeline rank);
    3. model_states: weights + gradients + optimizer of the stage; weights_and_gradients and optimizer_states the
       two parts as Megatron-Core's memory estimator and the Megatron-Core MoE report split them (the 16-bit
       weights with the main-grad buffer, and the fp32 main weights with the Adam moments);
    4. peak_reserved: the caching allocator's reserved peak, as the stacks print it (torch.cuda.memory_stats()
       ``reserved_bytes.all.peak``: torchtitan's metrics, Megatron's ``max_memory_reserved``), the stage's allocated
       peak x fragmentation; a bound (the run fit in the device) adds what lives outside the allocator
       (``RUNTIME_BYTES``), the stage's ``reserved`` as ``project`` checks a layout against the device.
    """
    from commlens.project.layout import ParallelLayout, resolve
    from commlens.project.memory import RUNTIME_BYTES, activation_bytes_per_token, stage_memory
    from commlens.workload import load_workload

    w = load_workload(fig.workload, fig.overrides)
    layout = ParallelLayout.model_validate(fig.layout)
    r = resolve(layout, w, fig.gpus, _PER_NODE)
    if fig.measures == "activations_per_layer":
        tokens = w.micro_batch * w.seq_len / r.cp
        if layout.recompute == "full":
            return tokens * 2.0 * w.hidden / (r.tp if layout.sp and r.tp > 1 else 1)
        kinds = ([False] if w.moe_layers < w.layers else []) + ([True] if w.moe_layers else [])
        return tokens * max(activation_bytes_per_token(w, layout, r.tp, moe) for moe in kinds)
    stages = stage_memory(w, layout, r)
    parts = {
        "activations": ("activations",),
        "peak_reserved": ("reserved",),
        "model_states": ("weights_shard", "gradients", "optimizer"),
        "weights_and_gradients": ("weights", "gradients"),
        "optimizer_states": ("optimizer",),
    }[fig.measures]
    values = [sum(st[k] for k in parts) for st in stages]
    if fig.measures == "peak_reserved" and fig.kind != "bound":  # the allocator's figure: no CUDA context, NCCL buffers
        values = [v - RUNTIME_BYTES for v in values]
    if fig.stage == "first":
        return values[0]
    if fig.stage == "last":
        return values[-1]
    if fig.stage.isdigit():  # one pipeline rank
        if int(fig.stage) >= len(values):
            from commlens.errors import CommlensError

            raise CommlensError(f"{fig.name}: stage {fig.stage}: the layout has {len(values)} pipeline stages")
        return values[int(fig.stage)]
    return max(values)


def validate_memory(
    accelerators: Sequence[str] | None = None,
    directory: Path | None = None,
    figures: Sequence[MemoryFigure] | None = None,
    where: str | None = None,
) -> list[MemoryResult]:
    """Every published memory figure against the model's (``figures``: these instead, from the file ``where``).
    ``accelerators`` is taken for the CLI's sake and not used: the memory model reads no accelerator figure
    (bounds are the published capacity)."""
    from commlens.errors import CommlensError
    from commlens.project.errors import InfeasibleLayoutError

    del accelerators
    label = where or _where(MEMORY, directory)
    out = []
    for fig in load_memory_figures(directory) if figures is None else figures:
        try:
            predicted: float | None = _predicted_bytes(fig)
            refused = ""
        except InfeasibleLayoutError as e:
            predicted, refused = None, str(e)
        except CommlensError as e:  # an unknown workload or topology of a file of one's own
            raise CommlensError(f"{label}: {fig.name}: {e}") from None
        except ValueError as e:  # the layout's fields (pydantic)
            raise CommlensError(f"{label}: {fig.name}: layout: {str(e).splitlines()[-1].strip()}") from None
        out.append(MemoryResult(fig.name, fig.measures, fig.stage, fig.kind, fig.published_bytes, predicted, refused))
    return out
