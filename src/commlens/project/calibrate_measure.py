"""The measurement side of ``commlens project calibrate``: time GEMMs and streaming kernels on one GPU.

1. :func:`plan_gemms` lists the shapes: large squares (the plateau), every GEMM
   of the Megatron SC'21 rows and a seeded sample of transformer GEMMs (tokens
   2048-32768, hidden 2048-25600 over TP 1-8; QKV 3h, projection, FFN 4h; the
   forward, data-gradient and weight-gradient products with their transposes),
   attention cores as batched products over heads (head dim 64, 128), and a few
   small ones; fp16 repeats the squares and every fourth other shape; fp8 (e4m3 operands, per-tensor scales,
   bf16 output, as Transformer Engine's per-tensor recipes run every GEMM) the squares and every third
   transformer GEMM, all in the one operand layout cuBLASLt runs fp8 in (B column-major), on GPUs of compute
   capability 8.9 and up.
2. Each shape is timed with CUDA events after warm-up: ``reps`` windows of
   ``inner`` back-to-back calls (inner > 1 only for kernels under ~0.2 ms), the
   time per call kept for every window; the plan keeps the sweep within its
   budget by choosing ``reps`` from a nominal rate (not from measurements), and
   GEMMs left when ``budget_s`` has passed are skipped (the file says how many).
3. Streaming kernels (copy, add, GeLU, softmax, layer norm, dropout) run as
   eager PyTorch runs them, over inputs of 64 MiB to 2 GiB.
4. Causal fused attention (``scaled_dot_product_attention`` on its flash and cuDNN backends), forward and
   backward, head dim 64 and 128, sequence 512 to 16k at 16k tokens (as the FlashAttention papers size it);
   the fit writes them as ``attention:`` entries of the efficiency tables.
5. Before all of these (after the warm-up and ``idle_s`` of idle), one attention call (:func:`plan_held`) in a short
   run (5 + 10 calls, as the published tables time their kernels) and again after ``hold_s`` seconds of it back to
   back: what the GPU keeps of a short run's rate at its power limit (``HeldRecord``; the fit's
   ``attention_sustained``) [27 s20 attsust].
Shapes run in a seeded random order so clock drift spreads over all kinds.
"""

from __future__ import annotations

import datetime
import math
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from commlens.project.calibration_file import (
    STREAM_KERNELS,
    AttentionRecord,
    CalibrationDtype,
    CalibrationFile,
    GemmKind,
    GemmLayout,
    GemmRecord,
    HeldRecord,
    MeasuredDevice,
    StreamRecord,
    attention_flops,
)
from commlens.project.errors import ProjectionError

__all__ = [
    "FP8_ALIGN",
    "FP8_CAPABILITY",
    "AttentionCase",
    "GemmCase",
    "StreamCase",
    "estimate_s",
    "measure",
    "plan_attention",
    "plan_gemms",
    "plan_held",
    "plan_streams",
]

# Nominal rates for planning repetitions only (about an H200): the file records what was measured.
_PLAN_FLOPS, _PLAN_BYTES_PER_S, _LAUNCH_S = 700e12, 4.0e12, 8e-6
_TOKENS = (2048, 4096, 8192, 16384, 32768)
_HIDDEN = (2048, 2304, 3072, 4096, 5120, 6144, 8192, 10240, 12288, 16384, 20480, 25600)
_TP = (1, 2, 4, 8)
# Megatron SC'21 Table 1 rows: (hidden, TP, tokens of one micro-batch = micro-batch x 2048)
_MEGATRON = (
    (2304, 1, 32768),
    (3072, 2, 32768),
    (4096, 4, 32768),
    (6144, 8, 16384),
    (8192, 8, 8192),
    (10240, 8, 4096),
    (12288, 8, 4096),
    (16384, 8, 2048),
    (20480, 8, 2048),
    (25600, 8, 2048),
)
FP8_ALIGN = 16  # torch._scaled_mm's fp8 operands: every dimension a multiple of 16
FP8_CAPABILITY = (8, 9)  # the first compute capability with fp8 tensor cores (Ada; Hopper is 9.0)
_MAX_FLOPS = 4e12  # transformer shapes above this (~6 ms) add time, not information: the plateau is known by then
_STREAM_SIZES = (64 << 20, 256 << 20, 1 << 30, 2 << 30)


@dataclass(frozen=True)
class GemmCase:
    kind: GemmKind
    label: str
    m: int
    n: int
    k: int
    batch: int = 1
    layout: GemmLayout = "nn"
    dtype: CalibrationDtype = "bf16"


@dataclass(frozen=True)
class AttentionCase:
    """Causal fused attention over ``batch`` x ``heads`` x ``seq_len`` of ``head_dim`` on one SDPA backend."""

    kernel: str  # fa2 (SDPA's flash backend), cudnn
    pass_: str  # fwd, bwd
    batch: int
    heads: int
    seq_len: int
    head_dim: int

    @property
    def flops(self) -> float:
        return attention_flops(self.batch, self.heads, self.seq_len, self.head_dim, self.pass_)


@dataclass(frozen=True)
class StreamCase:
    kernel: str
    size_bytes: int
    dtype: CalibrationDtype = "bf16"


def estimate_s(case: GemmCase | StreamCase | AttentionCase) -> float:
    """Planning estimate of one call (nominal rates); sets repetitions, never recorded as a result."""
    if isinstance(case, AttentionCase):
        return case.flops / (_PLAN_FLOPS / 2) + _LAUNCH_S
    if isinstance(case, StreamCase):
        return case.size_bytes * STREAM_KERNELS[case.kernel] / _PLAN_BYTES_PER_S + _LAUNCH_S
    c = case
    elem, rate = (1, 2 * _PLAN_FLOPS) if c.dtype == "fp8" else (2, _PLAN_FLOPS)
    nbytes = elem * c.batch * (c.m * c.k + c.k * c.n + c.m * c.n)
    return max(2.0 * c.m * c.n * c.k * c.batch / rate, nbytes / _PLAN_BYTES_PER_S) + _LAUNCH_S


def _layer_gemms(hidden: int, tp: int, tokens: int) -> list[GemmCase]:
    """The 12 GEMMs of one transformer layer on one TP rank, as step.py asks for them."""
    out = []
    for name, n_out, k_in in (
        ("qkv", 3 * hidden // tp, hidden),
        ("proj", hidden, hidden // tp),
        ("fc1", 4 * hidden // tp, hidden),
        ("fc2", hidden, 4 * hidden // tp),
    ):
        label = f"h{hidden} tp{tp} t{tokens} {name}"
        out += [
            GemmCase("transformer", f"{label} fwd", tokens, n_out, k_in, layout="nt"),  # x @ W^T
            GemmCase("transformer", f"{label} dgrad", tokens, k_in, n_out, layout="nn"),  # dY @ W
            GemmCase("transformer", f"{label} wgrad", k_in, n_out, tokens, layout="tn"),
        ]  # X^T @ dY
    return out


def plan_gemms(seed: int = 0, sample: int = 240) -> list[GemmCase]:
    """Every GEMM of the sweep, in the seeded order they run (see the module docstring)."""
    rng = random.Random(seed)
    squares = [GemmCase("square", f"square {s}", s, s, s) for s in (4096, 5120, 6144, 8192, 10240, 12288, 16384)]
    megatron = [g for h, tp, t in _MEGATRON for g in _layer_gemms(h, tp, t)]
    pool = [
        g
        for h in _HIDDEN
        for tp in _TP
        for t in _TOKENS
        for g in _layer_gemms(h, tp, t)
        if 2.0 * g.m * g.n * g.k <= _MAX_FLOPS
    ]
    seen = {(g.m, g.n, g.k, g.layout) for g in megatron}
    pool = [g for g in pool if (g.m, g.n, g.k, g.layout) not in seen]
    sampled = rng.sample(pool, min(sample, len(pool)))
    attention = []
    for s in (1024, 2048, 4096, 8192):
        for d in (64, 128):
            for heads in (16, 128):
                b = max(1, min(heads, (4 << 30) // (2 * s * s)))  # scores tensor at most 4 GiB
                tag = f"attn s{s} d{d} b{b}"
                attention += [
                    GemmCase("attention", f"{tag} scores", s, s, d, b, "nt"),  # Q @ K^T
                    GemmCase("attention", f"{tag} context", s, d, s, b, "nn"),  # P @ V
                    GemmCase("attention", f"{tag} grad", s, d, s, b, "tn"),
                ]  # dS^T @ Q, P^T @ dC
    attention = list(dict.fromkeys(attention))
    small = [
        GemmCase("small", f"small {m}x{n}x{k}", m, n, k)
        for m, n, k in (
            (256, 256, 256),
            (512, 512, 512),
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (128, 4096, 4096),
            (4096, 128, 4096),
            (4096, 4096, 128),
            (4096, 4096, 64),
            (64, 8192, 8192),
            (8192, 8192, 64),
            (1024, 4096, 1024),
            (2048, 1024, 8192),
        )
    ]
    bf16 = squares + megatron + sampled + attention + small
    fp16 = [
        GemmCase(g.kind, g.label, g.m, g.n, g.k, g.batch, g.layout, "fp16")
        for i, g in enumerate(bf16)
        if g.kind == "square" or i % 4 == 0
    ]
    # cuBLASLt runs fp8 only with A row-major and B column-major; Transformer Engine makes the transposed copies the
    # data and weight gradients need itself (kernels.py prices those casts), so each shape is timed in that layout
    fp8 = list(
        dict.fromkeys(
            GemmCase(g.kind, g.label, g.m, g.n, g.k, 1, "nt", "fp8")
            for i, g in enumerate(bf16)
            if (g.kind == "square" or (g.kind == "transformer" and i % 3 == 0))
            and g.m % FP8_ALIGN == 0
            and g.n % FP8_ALIGN == 0
            and g.k % FP8_ALIGN == 0
        )
    )
    cases = bf16 + fp16 + fp8
    rng.shuffle(cases)
    return cases


def plan_streams(sizes: tuple[int, ...] = _STREAM_SIZES) -> list[StreamCase]:
    return [StreamCase(kernel, size) for size in sizes for kernel in STREAM_KERNELS]


def plan_attention(
    seq_lens: tuple[int, ...] = (512, 1024, 2048, 4096, 8192, 16384),
    head_dims: tuple[int, ...] = (64, 128),
    kernels: tuple[str, ...] = ("fa2", "cudnn"),
    tokens: int = 16384,
    width: int = 2048,
) -> list[AttentionCase]:
    """Causal attention as the FlashAttention benchmarks size it: batch x seq = ``tokens``, heads x head dim =
    ``width``; forward and backward, on each SDPA backend asked for."""
    return [
        AttentionCase(kernel, pass_, max(1, tokens // s), width // d, s, d)
        for kernel in kernels
        for d in head_dims
        for s in seq_lens
        for pass_ in ("fwd", "bwd")
    ]


def plan_held() -> AttentionCase:
    """The call :func:`measure` holds: cuDNN's causal forward, batch 4 x 8192 tokens, 16 heads of 128 (the shape
    flashinfer PR #2899 timed back to back on a B200)."""
    return AttentionCase("cudnn", "fwd", 4, 16, 8192, 128)


def _attention_call(case: AttentionCase, device: str) -> Callable[[], object]:
    """One forward, or one backward of a forward made beforehand, on the backend the case names."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[case.kernel]
    if device != "cuda":
        backend = SDPBackend.MATH  # tests of this code on a CPU
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    shape = (case.batch, case.heads, case.seq_len, case.head_dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dt, requires_grad=case.pass_ == "bwd") for _ in range(3))

    def forward() -> torch.Tensor:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    if case.pass_ == "fwd":
        return forward
    out = forward()
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


def _repeats(est_s: float) -> tuple[int, int, int]:
    """(warm-up windows, timed windows, calls per window) for a call of about ``est_s``."""
    inner = max(1, min(50, math.ceil(2e-4 / est_s)))
    window = est_s * inner
    reps = max(5, min(20, math.ceil(0.05 / window)))
    return 2, reps, inner


def _timer(device: str) -> Callable[[Callable[[], object], int, int, int], list[float]]:
    """Seconds per call of ``fn``: CUDA events on a GPU; wall clock elsewhere (tests only)."""
    import torch

    def cuda(fn: Callable[[], object], warmup: int, reps: int, inner: int) -> list[float]:
        for _ in range(warmup * inner):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends):
            start.record()
            for _ in range(inner):
                fn()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) / 1e3 / inner for s, e in zip(starts, ends)]

    def wall(fn: Callable[[], object], warmup: int, reps: int, inner: int) -> list[float]:
        for _ in range(warmup * inner):
            fn()
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            out.append((time.perf_counter() - t0) / inner)
        return out

    return cuda if device == "cuda" else wall


def _gemm_call(case: GemmCase, device: str) -> Callable[[], object]:
    import torch

    if case.dtype == "fp8":  # e4m3 operands, per-tensor scales, bf16 output; B column-major, as cuBLASLt runs fp8
        e4m3 = torch.float8_e4m3fn
        a8 = torch.randn(case.m, case.k, device=device, dtype=torch.bfloat16).to(e4m3)
        b8 = torch.randn(case.n, case.k, device=device, dtype=torch.bfloat16).to(e4m3).t()
        one = torch.ones((), device=device, dtype=torch.float32)
        return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[case.dtype]
    lead = (case.batch,) if case.batch > 1 else ()

    def operand(rows: int, cols: int, transposed: bool):  # a rows x cols operand, stored transposed if asked
        if transposed:
            return torch.randn(*lead, cols, rows, device=device, dtype=dt).transpose(-1, -2)
        return torch.randn(*lead, rows, cols, device=device, dtype=dt)

    a = operand(case.m, case.k, case.layout[0] == "t")
    b = operand(case.k, case.n, case.layout[1] == "t")
    c = torch.empty(*lead, case.m, case.n, device=device, dtype=dt)
    if case.batch > 1:
        return lambda: torch.bmm(a, b, out=c)
    return lambda: torch.mm(a, b, out=c)


def _stream_call(case: StreamCase, device: str) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F

    n = case.size_bytes // 2
    x = torch.randn(n, device=device, dtype=torch.bfloat16)
    if case.kernel == "copy":
        y = torch.empty_like(x)
        return lambda: y.copy_(x)
    if case.kernel == "add":
        y, z = torch.randn_like(x), torch.empty_like(x)
        return lambda: torch.add(x, y, out=z)
    if case.kernel == "gelu":
        return lambda: F.gelu(x)
    if case.kernel == "softmax":  # [b x heads, s, s] scores of s 2048 (smaller inputs: shorter rows)
        s = 2048 if n >= 2048 * 2048 else 256
        scores = x[: n - n % (s * s)].view(-1, s, s)
        return lambda: torch.softmax(scores, dim=-1)
    if case.kernel == "layer_norm":
        h = 4096
        rows = x[: n - n % h].view(-1, h)
        w, bias = torch.ones(h, device=device, dtype=x.dtype), torch.zeros(h, device=device, dtype=x.dtype)
        return lambda: F.layer_norm(rows, (h,), w, bias)
    if case.kernel == "dropout":
        return lambda: F.dropout(x, 0.1, training=True)
    raise ValueError(f"unknown streaming kernel {case.kernel!r}")


def _clocks() -> dict[str, str]:
    """nvidia-smi's clocks, power and temperature of GPU 0, or {} without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return {}
    fields = "clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,driver_version"
    try:
        out = subprocess.run(
            ["nvidia-smi", "-i", "0", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return dict(zip(fields.split(","), (v.strip() for v in out.split(","))))


def measure(
    gemms: list[GemmCase],
    streams: list[StreamCase],
    *,
    device: str = "cuda",
    seed: int = 0,
    budget_s: float = 150.0,
    progress: Callable[[int, int, str], None] | None = None,
    repeats: tuple[int, int, int] | None = None,
    attention: list[AttentionCase] | None = None,
    held: AttentionCase | None = None,
    hold_s: float = 5.0,
    idle_s: float = 2.0,
) -> CalibrationFile:
    """Time every case on ``device`` (``cuda``; ``cpu`` only for tests of this code) and return the file;
    ``repeats`` (warm-up windows, timed windows, calls per window) replaces the planned ones (tests). ``held``: an
    attention call timed in a short run after ``idle_s`` of idle and again after ``hold_s`` back to back, first."""
    import platform

    import torch

    torch.manual_seed(seed)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    timer = _timer(device)
    measured = _measured_device(device, timer)
    fp8_unsupported = _fp8_unsupported(device)
    fp8_planned = sum(1 for g in gemms if g.dtype == "fp8")
    if fp8_unsupported:
        gemms = [g for g in gemms if g.dtype != "fp8"]
    attention = attention or []
    run = _Run(timer, repeats, progress, len(gemms) + len(streams) + len(attention))
    t0 = time.monotonic()
    held_row = _measure_held(run, held, device, idle_s, hold_s) if held is not None else None
    # the GEMMs' budget starts after the held call, whose idle and hold are fixed seconds of their own
    gemm_rows, stream_rows, skipped = _measure_kernels(run, [*streams, *gemms], device, budget_s, time.monotonic())
    attention_rows = _measure_attention(run, attention, device)
    if device == "cuda":
        measured = measured.model_copy(
            update={"clocks": {**measured.clocks, **{f"after {k}": v for k, v in _clocks().items()}}}
        )
    software = {"torch": torch.__version__, "cuda": str(torch.version.cuda), "python": platform.python_version()}
    settings = {
        "seed": seed,
        "gemm_cases": len(gemms),
        "stream_cases": len(streams),
        "budget_s": budget_s,
        "gemm_cases_skipped_over_budget": skipped,
        "fp8": (
            f"{fp8_planned} fp8 GEMMs planned, not measured: {fp8_unsupported}"
            if fp8_unsupported
            else "e4m3 operands, per-tensor scales, bf16 output (torch._scaled_mm, B column-major)"
        ),
        "failed": run.failed,
        "elapsed_s": round(time.monotonic() - t0, 1),
        "timer": "cuda events" if device == "cuda" else "wall clock (test run, not a calibration)",
        "repeats": list(repeats)
        if repeats
        else "2 warm-up windows; 5-20 timed windows of 1-50 calls (~50 ms per shape); median per call",
    }
    if not gemm_rows:
        raise ProjectionError(
            f"no GEMM could be measured ({skipped} over budget; failures: "
            f"{'; '.join(f'{k}: {v}' for k, v in list(run.failed.items())[:3]) or 'none'})"
        )
    return CalibrationFile(
        created=created,
        device=measured,
        software=software,
        settings=settings,
        gemm=tuple(gemm_rows),
        stream=tuple(stream_rows),
        attention=tuple(attention_rows),
        held=held_row,
    )


def _fp8_unsupported(device: str) -> str:
    """Why this device cannot run the fp8 GEMMs ('' when it can): compute capability below 8.9, or a torch
    without ``_scaled_mm``."""
    import torch

    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    if device != "cuda":
        return ""
    capability = torch.cuda.get_device_capability(0)
    if capability < FP8_CAPABILITY:
        return f"compute capability {capability[0]}.{capability[1]} has no fp8 tensor cores (8.9 and up have)"
    return ""


@dataclass
class _Run:
    """One sweep's timer, repeats, progress callback and count, and the cases that failed (label -> reason)."""

    timer: Callable[[Callable[[], object], int, int, int], list[float]]
    repeats: tuple[int, int, int] | None
    progress: Callable[[int, int, str], None] | None
    total: int
    done: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    def step(self, note: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total, note)


def _measured_device(
    device: str, timer: Callable[[Callable[[], object], int, int, int], list[float]]
) -> MeasuredDevice:
    """What the GPU says of itself and its clocks; on CUDA, after ~1 s of large GEMMs (clocks up, cuBLAS loaded)."""
    import platform

    import torch

    if device != "cuda":
        return MeasuredDevice(
            name=f"cpu ({platform.processor() or platform.machine()})", sms=1, capability="none", memory_bytes=0
        )
    props = torch.cuda.get_device_properties(0)
    measured = MeasuredDevice(
        name=torch.cuda.get_device_name(0),
        sms=props.multi_processor_count,
        capability=f"{props.major}.{props.minor}",
        memory_bytes=props.total_memory,
        clocks={f"before {k}": v for k, v in _clocks().items()},
    )
    warm = _gemm_call(GemmCase("square", "warm-up", 8192, 8192, 8192), device)
    timer(warm, 0, 500, 1)
    return measured


def _measure_kernels(
    run: _Run, cases: list[GemmCase | StreamCase], device: str, budget_s: float, t0: float
) -> tuple[list[GemmRecord], list[StreamRecord], int]:
    """Time the streaming kernels and GEMMs in turn (streams first: few and short; GEMMs over budget are
    skipped): their records and how many were skipped."""
    gemm_rows: list[GemmRecord] = []
    stream_rows: list[StreamRecord] = []
    skipped = 0
    call: Callable[[], object] | None = None
    for case in cases:
        if isinstance(case, GemmCase) and time.monotonic() - t0 > budget_s:
            skipped += 1
            continue
        warmup, reps, inner = run.repeats or _repeats(estimate_s(case))
        try:
            call = _gemm_call(case, device) if isinstance(case, GemmCase) else _stream_call(case, device)
            times = run.timer(call, warmup, reps, inner)
        except (RuntimeError, ValueError) as e:  # out of memory, a shape or scaling torch rejects: recorded, goes on
            run.failed[f"{case.dtype} {getattr(case, 'label', getattr(case, 'kernel', ''))}"] = str(e).splitlines()[0]
            continue
        finally:
            call = None
        med = statistics.median(times)
        if isinstance(case, GemmCase):
            gemm_rows.append(_gemm_record(case, times, med))
            note = f"{case.dtype} {case.label}: {gemm_rows[-1].tflops:.0f} TFLOP/s"
        else:
            moved = case.size_bytes * STREAM_KERNELS[case.kernel]
            stream_rows.append(
                StreamRecord(
                    kernel=case.kernel,
                    size_bytes=case.size_bytes,
                    bytes_moved=moved,
                    dtype=case.dtype,
                    times_s=tuple(times),
                    time_s=med,
                    bytes_per_s=moved / med,
                )
            )
            note = f"{case.kernel} {case.size_bytes >> 20} MiB: {moved / med / 1e9:.0f} GB/s"
        run.step(note)
    return gemm_rows, stream_rows, skipped


def _gemm_record(case: GemmCase, times: list[float], med: float) -> GemmRecord:
    return GemmRecord(
        kind=case.kind,
        label=case.label,
        m=case.m,
        n=case.n,
        k=case.k,
        batch=case.batch,
        layout=case.layout,
        dtype=case.dtype,
        times_s=tuple(times),
        time_s=med,
        tflops=2.0 * case.m * case.n * case.k * case.batch / med / 1e12,
    )


def _measure_held(run: _Run, case: AttentionCase, device: str, idle_s: float, hold_s: float) -> HeldRecord | None:
    """``case`` in a short run on a GPU left idle for ``idle_s`` (5 warm-up calls, 10 timed: a published table's
    run), then back to back for ``hold_s`` seconds, then 10 timed calls more; None (the reason in ``run.failed``)
    where the call cannot run."""
    import torch

    label = f"held attention {case.kernel} {case.pass_} d{case.head_dim} s{case.seq_len}"
    call: Callable[[], object] | None = None
    try:
        call = _attention_call(case, device)
        run.timer(call, 1, 1, 1)  # the kernel loaded, before the idle
        if device == "cuda":
            torch.cuda.synchronize()
        time.sleep(idle_s)
        before = _clocks() if device == "cuda" else {}
        short = run.timer(call, 5, 10, 1)
        end = time.monotonic() + hold_s
        while time.monotonic() < end:
            for _ in range(20):
                call()
            if device == "cuda":
                torch.cuda.synchronize()
        held = run.timer(call, 0, 10, 1)
        after = _clocks() if device == "cuda" else {}
    except RuntimeError as e:  # a backend this GPU or build lacks: recorded, the sweep goes on
        run.failed[label] = str(e).splitlines()[0] if str(e) else type(e).__name__
        return None
    finally:
        call = None
    short_s, held_s = statistics.median(short), statistics.median(held)
    clocks = {**{f"before {k}": v for k, v in before.items()}, **{f"after hold {k}": v for k, v in after.items()}}
    return HeldRecord.model_validate(
        {
            "kernel": case.kernel,
            "pass": case.pass_,
            "batch": case.batch,
            "heads": case.heads,
            "seq_len": case.seq_len,
            "head_dim": case.head_dim,
            "idle_s": idle_s,
            "hold_s": hold_s,
            "short_times_s": tuple(short),
            "short_s": short_s,
            "held_times_s": tuple(held),
            "held_s": held_s,
            "keep": short_s / held_s,
            "clocks": clocks,
        }
    )


def _measure_attention(run: _Run, attention: list[AttentionCase], device: str) -> list[AttentionRecord]:
    """Time the attention cases (after the GEMMs, whatever the budget: a few dozen calls)."""
    attention_rows: list[AttentionRecord] = []
    call: Callable[[], object] | None = None
    for att in attention:
        warmup, reps, inner = run.repeats or _repeats(estimate_s(att))
        label = f"attention {att.kernel} {att.pass_} d{att.head_dim} s{att.seq_len}"
        try:
            call = _attention_call(att, device)
            times = run.timer(call, warmup, reps, inner)
        except RuntimeError as e:  # a backend this GPU or build lacks: recorded, the sweep goes on
            run.failed[label] = str(e).splitlines()[0] if str(e) else type(e).__name__
            continue
        finally:
            call = None
        med = statistics.median(times)
        attention_rows.append(
            AttentionRecord.model_validate(
                {
                    "kernel": att.kernel,
                    "pass": att.pass_,
                    "causal": True,
                    "batch": att.batch,
                    "heads": att.heads,
                    "seq_len": att.seq_len,
                    "head_dim": att.head_dim,
                    "dtype": "bf16",
                    "times_s": tuple(times),
                    "time_s": med,
                    "tflops": att.flops / med / 1e12,
                }
            )
        )
        run.step(f"{label}: {attention_rows[-1].tflops:.0f} TFLOP/s")
    return attention_rows
