"""The measurement file of ``commlens project calibrate`` (versioned JSON): GEMMs, streaming and attention kernels.

One file holds one sweep on one GPU: what was measured (device, software,
clocks, settings) once at the top, then every measurement with its raw
repetition times (``times_s``), their median (``time_s``) and the rate derived
from it. Records check themselves when loaded: positive times, a median that is
the median of the samples, a rate that follows from shape and time. Only
``commlens.gemm-calibration/1`` exists; a file of another version is refused
by name.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from commlens.files import atomic_text
from commlens.project.errors import ProjectionError

__all__ = [
    "CALIBRATION_FORMAT",
    "GEMM_KINDS",
    "CalibrationDtype",
    "GemmKind",
    "GemmLayout",
    "STREAM_KERNELS",
    "AttentionRecord",
    "CalibrationFile",
    "CalibrationFileError",
    "GemmRecord",
    "HeldRecord",
    "MeasuredDevice",
    "StreamRecord",
    "attention_flops",
    "load_calibration",
    "save_calibration",
]

CALIBRATION_FORMAT: Final = "commlens.gemm-calibration/1"
GemmKind = Literal["square", "transformer", "attention", "small"]
GemmLayout = Literal["nn", "nt", "tn"]  # whether A and B are read transposed (n: no, t: yes)
# fp8: e4m3 operands with per-tensor scales and a bf16 output (torch._scaled_mm), as Transformer Engine's per-tensor
# recipes run every GEMM
CalibrationDtype = Literal["bf16", "fp16", "fp8"]
GEMM_KINDS: tuple[GemmKind, ...] = ("square", "transformer", "attention", "small")
# Streaming kernels and the HBM bytes each moves per byte of its input x (bf16), as eager PyTorch runs them.
STREAM_KERNELS: dict[str, float] = {
    "copy": 2.0,  # y.copy_(x): read x, write y
    "add": 3.0,  # torch.add(x, y, out=z)
    "gelu": 2.0,  # F.gelu(x)
    "softmax": 2.0,  # torch.softmax(x, -1) over [b x heads, s, s]
    "layer_norm": 2.0,  # F.layer_norm(x, (h,), w, b) over [tokens, h]
    "dropout": 2.5,  # F.dropout(x, 0.1): read x, write the output and a 1-byte mask per element
}
_REL_TOL = 1e-6


class CalibrationFileError(ProjectionError):
    """A measurement file that cannot be used; the message names the file and the problem."""


def attention_flops(batch: int, heads: int, seq_len: int, head_dim: int, pass_: str, causal: bool = True) -> float:
    """FLOPs of one attention call as the FlashAttention benchmarks count them: forward 4 b s^2 h d, halved when
    causal; backward 2.5 x the forward's (it recomputes the scores)."""
    fwd = 4.0 * batch * seq_len**2 * heads * head_dim / (2 if causal else 1)
    return fwd if pass_ == "fwd" else 2.5 * fwd


def _check_rate(flops: float, time_s: float, tflops: float) -> None:
    """A record's ``tflops`` must be its FLOPs over its median time."""
    if abs(flops / time_s / 1e12 - tflops) > _REL_TOL * tflops:
        raise ValueError(f"tflops {tflops} does not follow from the shape and time_s")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: CalibrationDtype = Field(description="element type of the operands")
    times_s: tuple[float, ...] = Field(min_length=1, description="one time per repetition, seconds")
    time_s: float = Field(gt=0, description="median of times_s")

    @model_validator(mode="after")
    def _median(self) -> _Record:
        if any(t <= 0 for t in self.times_s):
            raise ValueError(f"times_s: every time must be > 0 s (got {min(self.times_s)})")
        if abs(statistics.median(self.times_s) - self.time_s) > _REL_TOL * self.time_s:
            raise ValueError(f"time_s {self.time_s} is not the median of times_s ({statistics.median(self.times_s)})")
        return self


class GemmRecord(_Record):
    """``batch`` products (m x k) @ (k x n); layout: whether A and B are read transposed (n: no, t: yes)."""

    kind: GemmKind = Field(description="why the shape is measured")
    label: str = Field(description="where the shape comes from (e.g. 'h8192 tp4 fc1 wgrad')")
    m: int = Field(ge=1)
    n: int = Field(ge=1)
    k: int = Field(ge=1)
    batch: int = Field(1, ge=1, description="independent products in one batched call")
    layout: GemmLayout = "nn"
    tflops: float = Field(gt=0, description="2 m n k batch / time_s / 1e12")

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    @model_validator(mode="after")
    def _rate(self) -> GemmRecord:
        _check_rate(self.flops, self.time_s, self.tflops)
        return self


class StreamRecord(_Record):
    """One streaming kernel over an input of ``size_bytes``, moving ``bytes_moved`` through HBM per call."""

    kernel: str = Field(description="one of STREAM_KERNELS")
    size_bytes: int = Field(ge=1, description="bytes of the input tensor x")
    bytes_moved: float = Field(gt=0, description="HBM bytes read + written per call")
    bytes_per_s: float = Field(gt=0, description="bytes_moved / time_s")

    @model_validator(mode="after")
    def _rate(self) -> StreamRecord:
        if self.kernel not in STREAM_KERNELS:
            raise ValueError(f"kernel {self.kernel!r} unknown; known: {', '.join(STREAM_KERNELS)}")
        if abs(self.bytes_moved / self.time_s - self.bytes_per_s) > _REL_TOL * self.bytes_per_s:
            raise ValueError(f"bytes_per_s {self.bytes_per_s} does not follow from bytes_moved and time_s")
        return self


class AttentionRecord(_Record):
    """One fused attention call (``torch.nn.functional.scaled_dot_product_attention`` on one backend), forward or
    backward, over ``batch`` x ``heads`` x ``seq_len`` queries of ``head_dim``; ``tflops`` counted as the
    FlashAttention benchmarks count (forward 4 b s^2 h d, halved when causal; backward 2.5 x the forward's)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    kernel: Literal["fa2", "cudnn", "efficient", "math"] = Field(description="SDPA backend: flash (FA2), cudnn, ...")
    pass_: Literal["fwd", "bwd"] = Field(alias="pass")
    causal: bool
    batch: int = Field(ge=1)
    heads: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    tflops: float = Field(gt=0)

    @property
    def flops(self) -> float:
        return attention_flops(self.batch, self.heads, self.seq_len, self.head_dim, self.pass_, self.causal)

    @model_validator(mode="after")
    def _rate(self) -> AttentionRecord:
        _check_rate(self.flops, self.time_s, self.tflops)
        return self


class HeldRecord(BaseModel):
    """One fused attention call timed twice [27 s20 attsust]: in a short run on a GPU left idle for ``idle_s``
    (``short_times_s``: 5 warm-up calls, then 10 timed, as the published attention tables time their kernels), and
    again after ``hold_s`` seconds of the same call back to back (``held_times_s``: the GPU at its power limit, as a
    training step holds it). ``keep`` = ``short_s / held_s``, the fraction of a short run's rate the GPU keeps held:
    what an accelerator's ``attention_sustained`` states."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    kernel: Literal["fa2", "cudnn", "efficient", "math"] = Field(description="SDPA backend")
    pass_: Literal["fwd", "bwd"] = Field(alias="pass")
    batch: int = Field(ge=1)
    heads: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    dtype: CalibrationDtype = "bf16"
    idle_s: float = Field(ge=0, description="seconds the GPU was left idle before the short run")
    hold_s: float = Field(gt=0, description="seconds of back-to-back calls before the held run")
    short_times_s: tuple[float, ...] = Field(min_length=1, description="the short run's time per call, seconds")
    short_s: float = Field(gt=0, description="median of short_times_s")
    held_times_s: tuple[float, ...] = Field(min_length=1, description="the held run's time per call, seconds")
    held_s: float = Field(gt=0, description="median of held_times_s")
    keep: float = Field(gt=0, description="short_s / held_s")
    clocks: dict[str, str] = Field(default_factory=dict, description="nvidia-smi before the short run, after the hold")

    @property
    def flops(self) -> float:
        """One call's FLOPs (causal), as :class:`AttentionRecord` counts them."""
        return attention_flops(self.batch, self.heads, self.seq_len, self.head_dim, self.pass_)

    @model_validator(mode="after")
    def _medians(self) -> HeldRecord:
        for name, times, med in (
            ("short", self.short_times_s, self.short_s),
            ("held", self.held_times_s, self.held_s),
        ):
            if any(t <= 0 for t in times):
                raise ValueError(f"{name}_times_s: every time must be > 0 s (got {min(times)})")
            if abs(statistics.median(times) - med) > _REL_TOL * med:
                raise ValueError(f"{name}_s {med} is not the median of {name}_times_s ({statistics.median(times)})")
        if abs(self.short_s / self.held_s - self.keep) > _REL_TOL * self.keep:
            raise ValueError(f"keep {self.keep} is not short_s / held_s ({self.short_s / self.held_s})")
        return self


class MeasuredDevice(BaseModel):
    """The GPU as CUDA and nvidia-smi reported it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="torch.cuda.get_device_name")
    sms: int = Field(ge=1, description="multiprocessors")
    capability: str = Field(description="compute capability, e.g. 9.0")
    memory_bytes: int = Field(ge=0)
    clocks: dict[str, str] = Field(default_factory=dict, description="nvidia-smi readings before/after, if any")


class CalibrationFile(BaseModel):
    """One calibration sweep: settings once, then every measurement."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["commlens.gemm-calibration/1"] = CALIBRATION_FORMAT
    created: str = Field(min_length=1, description="UTC time the sweep started, ISO 8601")
    device: MeasuredDevice
    software: dict[str, str] = Field(description="torch, CUDA, cuBLAS, python versions")
    settings: Mapping[str, object] = Field(
        description="seed, warm-up, repetitions, budget of the sweep (a record, not read back)"
    )
    gemm: tuple[GemmRecord, ...] = Field(min_length=1)
    stream: tuple[StreamRecord, ...] = ()
    attention: tuple[AttentionRecord, ...] = ()
    held: HeldRecord | None = Field(None, description="an attention call short and held at the power limit, if timed")


def load_calibration(path: str | Path) -> CalibrationFile:
    """Read and check a measurement file; :class:`CalibrationFileError` says what is wrong and where."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise CalibrationFileError(f"{path}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise CalibrationFileError(f"{path}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise CalibrationFileError(f"{path}: expected a JSON object")
    fmt = data.get("format")
    if fmt != CALIBRATION_FORMAT:
        raise CalibrationFileError(
            f"{path}: format {fmt!r} is not supported (this commlens reads {CALIBRATION_FORMAT})"
        )
    try:
        return CalibrationFile.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        msg = first["msg"].removeprefix("Value error, ")
        more = f" (and {e.error_count() - 1} more problems)" if e.error_count() > 1 else ""
        raise CalibrationFileError(f"{path}: {loc or 'file'}: {msg}{more}") from None


def save_calibration(cal: CalibrationFile, path: str | Path) -> None:
    """Write ``cal`` as JSON atomically (a temporary file in the same folder, then renamed)."""
    with atomic_text(path) as f:
        json.dump(cal.model_dump(mode="json", by_alias=True), f, indent=1)
        f.write("\n")
