"""Kernel efficiency tables as data: what published kernel benchmarks measured, per GPU and kernel class.

``efficiency.yaml`` beside this module (``format: commlens.efficiency/1``) lists, per accelerator (the names of
``accelerators.yaml``), measured TFLOP/s of attention kernels by family (``fa2``, ``fa3``, ``cudnn``, ``ck``), pass
(``fwd``, ``bwd``), causality, head size and sequence length, each with its origin. ``commlens project calibrate``
writes the same schema from a lent GPU; files in ``COMMLENS_EFFICIENCY`` (``os.pathsep``-separated) add to it.

:func:`attention_tflops` answers in FLOP/s (causal FLOPs counted halved, as the FlashAttention benchmarks count
them): the entries of the device (or of its generation's sibling, H200 from H100's: the same SMs and clocks),
kernel and pass, the nearest head size, causal rows first (below the shortest causal length, never faster than the
same kernel's rows without the mask there; a pass tabled only as forward + backward together, ``fwd_bwd``, takes
that rate), interpolated in log2 of the sequence length and held at the ends. ``None`` when nothing is tabled; the step model then uses its default (``FLASH_ATTENTION_FRACTION`` of a
large GEMM's rate). Rates follow the FlashAttention benchmarks' count: forward 4 b s^2 h d (halved when causal),
backward 2.5 x that (it recomputes the scores). A tabled rate is a short benchmark run's; the answer is it times the
device's ``attention_sustained`` (accelerators.yaml: what the GPU keeps held at its power limit for seconds, as a
training step holds it), except for rows marked ``sustained: true`` (calibrate's sweep) [27 s20 attsust].

Sliding-window attention (a causal band of ``window`` keys, itself included) is tabled apart: rows with a ``window``
key, whose rates count the band's score entries (cudnn-frontend's benchmark: w (w + 1) / 2 + (s - w) w a head and
sequence, 4 FLOPs an entry and head-dimension element forward, 10 backward). A windowed lookup reads the nearest tabled
window (log2) of the family; where the device has none for the family or its stand-ins, the family's causal curve at
the window's length (its short end, held there: optimistic, see docs/project.md).

:func:`gemm_rate_cap` reads the ``gemm`` rows and the ``grouped_gemm`` rows of layout ``per_expert`` (a loop of one
GEMM per expert) of a device and of the devices of its generation (scaled by the ratio of the large-GEMM rates, as
above): the measured rate of a GEMM of the dtype at its FLOP count, interpolated in log2 of the FLOPs over the upper
envelope of the measured points (a GEMM of more FLOPs is never capped below a smaller measured one) and held at the
ends. Only rows whose smallest dimension is at least ``GEMM_CAP_MIN_DIM`` count: a GEMM with a dimension of 64-192
(decode, a narrow projection) is another shape class. [27 s10 gemmshape]
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from commlens.project.errors import ProjectionError
from commlens.project.hardware import ACCELERATORS_ENV, ACCELERATORS_FORMAT
from commlens.specdata import load_yaml

__all__ = [
    "check_measured_sections",
    "EFFICIENCY_ENV",
    "EFFICIENCY_FORMAT",
    "attention_entries",
    "attention_tflops",
    "gemm_rate_cap",
    "mxfp8_quantize_fit",
    "stream_kernel_fit",
    "stream_kernel_fixed_s",
]

EFFICIENCY_FORMAT = "commlens.efficiency/1"
EFFICIENCY_ENV = "COMMLENS_EFFICIENCY"
# Devices without attention entries of their own borrow a sibling's: the same SMs and clocks, other HBM. The keys
# are accelerators.yaml's names (the B200 in a GB200 is "B200 (GB200)").
SIBLINGS = {
    "H200 SXM": "H100 SXM",
    "B200 (GB200)": "B200",
    "B200": "B200 (GB200)",
    "H100 SXM": "H200 SXM",
    "B300": "B300 (GB300)",  # [27 s25 b300] a DGX B300's GPU reads the GB300's measured tables, scaled
}
# Kernel families that stand in for one another when a device has no entry for the asked one (closest first).
# cudnn_9.13: cuDNN 9.10-9.13's fused attention (the 2025 containers), tabled on B200 only; elsewhere the cudnn curve
# cudnn_9.4: cuDNN 9.4.0's, tabled on H100 only (what the 2025 containers read on Hopper) [27 s11 hopattn]
FAMILY_FALLBACK = {
    "fa3": ("cudnn", "fa2"),
    "cudnn": ("fa3", "fa2"),
    "cudnn_9.13": ("cudnn", "fa3", "fa2"),
    "cudnn_9.4": ("cudnn", "fa3", "fa2"),
    "cudnn_9.19": ("cudnn", "fa3", "fa2"),
    "fa2": (),
    # FlashAttention v1 (flash-attn 1.0.x, and the Triton FlashAttention of its era): no stand-in, a family of its own
    # (llm-foundry's 2023 MPT runs [27 s14 mptattn])
    "fa1": (),
    "ck": ("fa2",),
}

# kernel, pass, causal, head_dim (query/key), seq_len, flop/s, window, value head size (head_dim_v; head_dim unless the
# row says otherwise: MLA's 192 / 128 [27 s11 mla]), sustained (the rate of a GPU held at its power limit, as
# `commlens project calibrate`'s sweep measures it; False: a short benchmark run at boost clock, which the device's
# attention_sustained scales [27 s20 attsust])
Entry = tuple[str, str, bool, int, float, float, int, int, bool]
GEMM_CAP_MIN_DIM = 512  # the smallest dimension of a tabled GEMM that gemm_rate_cap reads
GEMM_DTYPES = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}  # fp16 runs at bf16's tensor-core rate


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise ProjectionError(f"{where}: expected a positive number, got {v!r}")
    return float(v)


def _flag(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise ProjectionError(f"{where}: expected true or false, got {v!r}")
    return v


def _read(text: str, where: str, shipped: bool = False) -> dict[str, list[Entry]]:
    """Attention entries of an efficiency file, or of an accelerators file's ``attention:`` section (what
    ``commlens project calibrate`` writes); ``shipped``: the package's own efficiency.yaml."""
    return _attention_rows(load_yaml(text, shipped=shipped), where)


def check_measured_sections(data: Any, where: str) -> None:
    """Check an accelerators file's ``attention:`` and ``gemm:`` sections as the lookups will read them, when the file
    is loaded: a bad row is refused (:class:`ProjectionError` naming the file, the accelerator and the row) even where
    no projection would read it."""
    _attention_rows(data, where)
    _gemm_points(data, where)


def _attention_rows(data: Any, where: str) -> dict[str, list[Entry]]:
    if isinstance(data, dict) and data.get("format") == ACCELERATORS_FORMAT:
        section = data.get("attention") or {}
        if not isinstance(section, dict):
            raise ProjectionError(f"{where}: attention must map accelerator names to lists of entries")
        gpus: Any = {name: {"attention": rows} for name, rows in section.items()}
    elif not isinstance(data, dict) or data.get("format") != EFFICIENCY_FORMAT:
        raise ProjectionError(f"{where}: format must be {EFFICIENCY_FORMAT!r}")
    else:
        gpus = data.get("gpus") or {}
    out: dict[str, list[Entry]] = {}
    if not isinstance(gpus, dict):
        raise ProjectionError(f"{where}: gpus must be a mapping of accelerator names")
    for gpu, tables in gpus.items():
        if not isinstance(tables, dict):
            raise ProjectionError(f"{where}: {gpu}: must be a mapping")
        rows = tables.get("attention") or []
        if not isinstance(rows, list):
            raise ProjectionError(f"{where}: {gpu}: attention must be a list")
        for i, row in enumerate(rows):
            at = f"{where}: {gpu}: attention {i + 1}"
            if not isinstance(row, dict) or not row.get("origin"):
                raise ProjectionError(f"{at}: must be a mapping with an origin")
            out.setdefault(str(gpu), []).append(
                (
                    str(row.get("kernel")),
                    str(row.get("pass")),
                    bool(row.get("causal", True)),
                    int(_number(row.get("head_dim"), at)),
                    _number(row.get("seq_len"), at),
                    _number(row.get("tflops"), at) * 1e12,
                    int(_number(row["window"], at)) if "window" in row else 0,  # 0: attends over the whole sequence
                    int(_number(row.get("head_dim_v", row.get("head_dim")), at)),
                    _flag(row.get("sustained", False), f"{at}: sustained"),
                )
            )
    return out


@cache
def _tables(files: tuple[str, ...]) -> dict[str, list[Entry]]:
    shipped = resources.files("commlens.project") / "efficiency.yaml"
    merged: dict[str, list[Entry]] = {}
    if shipped.is_file():
        merged = _read(shipped.read_text(encoding="utf-8"), "efficiency.yaml", shipped=True)
    for f in files:
        try:
            text = Path(f).read_text(encoding="utf-8")
        except OSError as e:
            raise ProjectionError(f"{f}: cannot read: {e.strerror}") from None
        for gpu, rows in _read(text, f).items():  # a file's (kernel, pass, window) curves replace the ones before
            given = {(e[0], e[1], e[6]) for e in rows}
            merged[gpu] = rows + [e for e in merged.get(gpu, []) if (e[0], e[1], e[6]) not in given]
    return merged


def attention_entries(device: str, files: tuple[str, ...] = ()) -> tuple[list[Entry], float]:
    """The attention entries of ``device`` (the shipped tables, whose (kernel, pass) curves ``files``
    (accelerators files) and then the files in ``COMMLENS_EFFICIENCY`` replace), and the factor to scale their rates by: 1 for the device's
    own; for a device without entries, a tabled device of its generation (H200 from H100: the same SMs and
    clocks), scaled by the ratio of the two devices' large-GEMM rates (a 500 W H100 from a 700 W one). A device
    with entries of its own also reads the curves only its ``SIBLINGS`` entry tables, scaled the same way (returned
    scaled, with the factor 1) [27 s10 bwattn]. Kept per device, files and environment, as the tables it reads
    are (the list is shared: callers read it)."""
    env = os.environ.get(EFFICIENCY_ENV, "") + "\0" + os.environ.get(ACCELERATORS_ENV, "")
    return _attention_entries(device, tuple(files), env)


@lru_cache(maxsize=64)
def _attention_entries(device: str, files: tuple[str, ...], env_key: str) -> tuple[list[Entry], float]:
    """:func:`attention_entries`, built (``env_key``: the environment it reads, for the cache's key only)."""
    from commlens.project.frameworks import generation
    from commlens.project.hardware import active_devices

    env = tuple(p for p in os.environ.get(EFFICIENCY_ENV, "").split(os.pathsep) if p)
    tables = _tables(tuple(files) + env)
    devices = active_devices(files or None)

    def ratio(sibling: str) -> float:
        own, other = devices[device], devices[sibling]
        return (own.peak("bf16") * own.gemm_efficiency) / (other.peak("bf16") * other.gemm_efficiency)

    # a short benchmark run's rate, of this device or of a sibling scaled to it, at what the device keeps when held at
    # its power limit for seconds (Device.attention_sustained); a sustained measurement (calibrate's sweep) as it is
    keep = devices[device].attention_sustained if device in devices else 1.0

    def held(rows: list[Entry], scale: float = 1.0) -> list[Entry]:
        if keep == 1.0 and scale == 1.0:
            return rows
        return [(*e[:5], e[5] * scale * (1.0 if e[8] else keep), *e[6:]) for e in rows]

    if tables.get(device):
        # a curve the device does not table (a head size measured only on its sibling, the same silicon in
        # another board: B200 and GB200's B200) is the sibling's, scaled; the device's own curves come first
        sibling = SIBLINGS.get(device, "")
        if not tables.get(sibling) or sibling not in devices or device not in devices:
            return held(tables[device]), 1.0
        have = {_curve(e) for e in tables[device]}
        borrowed = [e for e in tables[sibling] if _curve(e) not in have]
        return held(tables[device]) + held(borrowed, ratio(sibling)), 1.0
    gen = generation(device)
    siblings = [SIBLINGS.get(device, "")] + sorted(g for g in tables if generation(g) == gen)
    for sibling in siblings:
        if tables.get(sibling) and sibling in devices and device in devices:
            return held(tables[sibling]), ratio(sibling)
    return [], 1.0


def _curve(e: Entry) -> tuple[str, str, bool, int, int, int]:
    """The curve an entry lies on: kernel, pass, causal mask, head sizes and window (its points are the lengths)."""
    return e[0], e[1], e[2], e[3], e[6], e[7]


def _at_head_size(rows: list[Entry], head_dim: int, v_dim: int) -> list[Entry]:
    """The rows of the head size a lookup reads: a query/key and value size tabled together (MLA's 192 / 128) where the
    lookup asks for exactly them; otherwise the nearest tabled size (in log2, the larger on a tie) among the rows whose
    value size is their query/key size, so rows of an asymmetric shape are read by that shape only [27 s11 mla]."""
    if v_dim != head_dim:
        exact = [e for e in rows if e[3] == head_dim and e[7] == v_dim]
        if exact:
            return exact
    rows = [e for e in rows if e[7] == e[3]] or rows
    dim = min({e[3] for e in rows}, key=lambda x: (abs(math.log2(x / head_dim)), -x))
    return [e for e in rows if e[3] == dim]


def _tabled(rows: list[Entry], head_dim: int, v_dim: int) -> bool:
    """Whether ``rows`` hold the query/key head size ``head_dim`` (with the value size ``v_dim``, 0: the same)."""
    return any(e[3] == head_dim and e[7] == (v_dim or head_dim) for e in rows)


@cache
def _lookup(
    device: str,
    kernel: str,
    pass_: str,
    head_dim: int,
    seq: float,
    files: tuple[str, ...],
    env: str,
    window: int = 0,
    v_dim: int = 0,
) -> float | None:
    # env (COMMLENS_EFFICIENCY and COMMLENS_ACCELERATORS) is part of the cache key only: attention_entries reads the
    # variables itself
    if window:
        entries, scale = attention_entries(device, files)
        rate = _windowed(entries, kernel, pass_, head_dim, seq, window, v_dim or head_dim)
        if rate is not None:
            return rate * scale
        # no windowed row for the family or its stand-ins: the causal curve at the window's length (its short end)
        return _lookup(device, kernel, pass_, head_dim, float(min(seq, window)), files, env, 0, v_dim)
    by_curve, scale = _unwindowed(device, tuple(files), env)
    chain = (kernel, *FAMILY_FALLBACK.get(kernel, ()))

    def family_rows(family: str) -> list[Entry]:
        # a pass not tabled apart takes the family's forward + backward rate where only that is published: the
        # measured time of the pair, split between the passes by their FLOPs (1 : 2.5)
        return by_curve.get((family, pass_)) or by_curve.get((family, "fwd_bwd"), [])

    for i, family in enumerate(chain):
        rows = family_rows(family)
        if not rows:
            continue
        if (
            family.startswith("cudnn_")
            and v_dim in (0, head_dim)
            and not _tabled(rows, head_dim, v_dim)
            and any(_tabled(family_rows(f), head_dim, v_dim) for f in chain[i + 1 :])
        ):
            # a cuDNN version measured at other head sizes only (cudnn_9.19: 128) gives way to a stand-in that tables
            # this one (gpt-oss's 64 in `cudnn`) rather than lend it another size's rate; MLA's asymmetric 192 / 128
            # keeps its version's nearest size, as no MLA run at the 2025 containers' cuDNN exists [27 s11 lead]
            continue
        at_dim = _at_head_size(rows, head_dim, v_dim or head_dim)
        causal = [(e[4], e[5]) for e in at_dim if e[2]]
        unmasked = [(e[4], e[5]) for e in at_dim if not e[2]]
        if not causal:
            return _on_curve(unmasked, seq) * scale
        rate = _on_curve(causal, seq)
        # masking only takes work away: a causal curve held past its shortest length is read no faster than the
        # same kernel without the mask there (the measured causal backward starts at 4k, the unmasked one at 512)
        if unmasked and seq < min(s for s, _ in causal):
            rate = min(rate, _on_curve(unmasked, seq))
        return rate * scale
    return None


@lru_cache(maxsize=64)
def _unwindowed(device: str, files: tuple[str, ...], env: str) -> tuple[dict[tuple[str, str], list[Entry]], float]:
    """:func:`attention_entries` without the windowed rows, by (kernel family, pass), in the table's order, and the
    factor to scale them by (``env``: as :func:`_lookup`'s, for the cache's key only). The lists are shared: callers
    read them."""
    entries, scale = attention_entries(device, files)
    out: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        if not e[6]:
            out.setdefault((e[0], e[1]), []).append(e)
    return out, scale


def _windowed(
    entries: list[Entry], kernel: str, pass_: str, head_dim: int, seq: float, window: int, v_dim: int
) -> float | None:
    """The family's (or a stand-in's) windowed rate: its nearest tabled window, then its nearest head size, on the
    curve over the sequence length; None when no windowed row of the pass is tabled for them."""
    for family in (kernel, *FAMILY_FALLBACK.get(kernel, ())):
        rows = [e for e in entries if e[6] and e[0] == family and e[1] == pass_]
        if not rows:
            continue
        win = min({e[6] for e in rows}, key=lambda x: (abs(math.log2(x / window)), x))
        rows = [e for e in rows if e[6] == win]
        return _on_curve([(e[4], e[5]) for e in _at_head_size(rows, head_dim, v_dim)], seq)
    return None


def _on_curve(points: list[tuple[float, float]], seq: float) -> float:
    """The rate at ``seq`` on a curve of (x, rate) points (a sequence length, or a GEMM's FLOPs): interpolated in
    log2 of x and held at the ends."""
    curve = sorted(points)
    if seq <= curve[0][0]:
        return curve[0][1]
    if seq >= curve[-1][0]:
        return curve[-1][1]
    for (s0, f0), (s1, f1) in zip(curve, curve[1:], strict=False):
        if s0 <= seq <= s1:
            x = math.log2(seq / s0) / math.log2(s1 / s0) if s1 > s0 else 0.0
            return f0 + (f1 - f0) * x
    return curve[-1][1]


def attention_tflops(
    device: str,
    kernel: str,
    pass_: str,
    head_dim: int,
    seq_len: float,
    files: tuple[str, ...] = (),
    window: int = 0,
    v_head_dim: int = 0,
) -> float | None:
    """Measured FLOP/s of ``kernel``'s ``pass_`` (causal) on ``device`` at ``head_dim`` and ``seq_len`` (a short
    run's rate at the device's ``attention_sustained``: what a step, the GPU at its power limit, sees), as the
    FlashAttention benchmarks count them (backward: 2.5 x the forward's FLOPs; with a value size ``v_head_dim`` apart
    from the query/key size, cudnn-frontend's count: forward 2 (d_qk + d_v), backward 2 (3 d_qk + 2 d_v) per score
    entry); None if nothing is tabled for it (nor for a stand-in family). ``files``: accelerators files whose
    ``attention:`` sections replace the shipped curves they give. ``window``: a sliding window of that many keys (0:
    none), its rate over the band's entries. ``v_head_dim`` 0: ``head_dim``."""
    if kernel == "unfused":
        return None
    return _lookup(
        device,
        kernel,
        pass_,
        int(head_dim),
        float(seq_len),
        tuple(files),
        os.environ.get(EFFICIENCY_ENV, "") + "\0" + os.environ.get(ACCELERATORS_ENV, ""),
        int(window),
        int(v_head_dim),
    )


def _gemm_points(data: Any, where: str) -> dict[str, list[tuple[str, float, float]]]:
    """(dtype, FLOPs, FLOP/s) of the ``gemm`` rows and the ``per_expert`` ``grouped_gemm`` rows, per accelerator: of
    an efficiency file, or of an accelerators file's ``gemm:`` section (the GEMMs ``commlens project calibrate``
    measured)."""
    out: dict[str, list[tuple[str, float, float]]] = {}
    gpus = data.get("gpus") if isinstance(data, dict) and data.get("format") == EFFICIENCY_FORMAT else None
    if isinstance(data, dict) and data.get("format") == ACCELERATORS_FORMAT:
        section = data.get("gemm") or {}
        if not isinstance(section, dict):
            raise ProjectionError(f"{where}: gemm must map accelerator names to lists of GEMM rows")
        gpus = {name: {"gemm": rows} for name, rows in section.items()}
    for gpu, tables in (gpus or {}).items():
        if not isinstance(tables, dict):
            continue
        if not isinstance(tables.get("gemm") or [], list):
            raise ProjectionError(f"{where}: {gpu}: gemm must be a list")
        rows = [(r.get("m") if isinstance(r, dict) else None, r) for r in tables.get("gemm") or []]
        rows += [
            (r.get("tokens_per_expert"), r) for r in tables.get("grouped_gemm") or [] if r.get("layout") == "per_expert"
        ]
        for i, (m, row) in enumerate(rows):
            if not isinstance(row, dict):
                raise ProjectionError(f"{where}: {gpu}: gemm row {i + 1}: must be a mapping")
            dtype = GEMM_DTYPES.get(str(row.get("dtype")))
            if dtype is None:
                continue
            at = f"{where}: {gpu}: gemm row {i + 1}"
            dims = (_number(m, at), _number(row.get("n"), at), _number(row.get("k"), at))
            if min(dims) >= GEMM_CAP_MIN_DIM:
                out.setdefault(str(gpu), []).append(
                    (dtype, 2.0 * math.prod(dims), _number(row.get("tflops"), at) * 1e12)
                )
    return out


@cache
def _shipped_data() -> dict[str, Any]:
    """The shipped efficiency.yaml, parsed once (read only: the GEMM and MXFP8 quantize lookups walk it)."""
    shipped = resources.files("commlens.project") / "efficiency.yaml"
    data = load_yaml(shipped.read_text(encoding="utf-8"), shipped=True)
    return data if isinstance(data, dict) else {}


@cache
def _gemm_curve(device: str, dtype: str, env: str, files: tuple[str, ...] = ()) -> tuple[tuple[float, float], ...]:
    """The upper envelope of the measured (FLOP, FLOP/s) points of ``device``'s generation, sorted by FLOPs: the
    shipped rows and those of the efficiency files in ``env``; where the accelerators ``files`` measured this
    device's GEMMs of ``dtype`` (their ``gemm:`` sections, what ``commlens project calibrate`` writes), those alone:
    the GPU's own sweep replaces the published figures of other GPUs and runs, as its attention curves do."""
    from commlens.project.frameworks import generation
    from commlens.project.hardware import active_devices

    def read(paths: Sequence[str]) -> dict[str, list[tuple[str, float, float]]]:
        out: dict[str, list[tuple[str, float, float]]] = {}
        for f in paths:
            try:
                text = Path(f).read_text(encoding="utf-8")
            except OSError as e:
                raise ProjectionError(f"{f}: cannot read: {e.strerror}") from None
            for gpu, rows in _gemm_points(load_yaml(text), f).items():
                out[gpu] = rows + out.get(gpu, [])
        return out

    found = [(flops, rate) for d, flops, rate in read(files).get(device, []) if d == dtype]
    points = _gemm_points(_shipped_data(), "efficiency.yaml")
    for gpu, rows in read([p for p in env.split(os.pathsep) if p]).items():
        points[gpu] = rows + points.get(gpu, [])
    if found:  # this GPU's own sweep
        points = {}
    devices = active_devices(None)
    own = devices.get(device)
    for gpu, rows in points.items():
        if gpu != device and (own is None or gpu not in devices or generation(gpu) != generation(device)):
            continue
        ratio = 1.0
        if gpu != device and own is not None:
            other = devices[gpu]
            ratio = (own.peak("bf16") * own.gemm_efficiency) / (other.peak("bf16") * other.gemm_efficiency)
        found += [(flops, rate * ratio) for d, flops, rate in rows if d == dtype]
    curve: list[tuple[float, float]] = []
    for flops, rate in sorted(found):
        rate = max(rate, curve[-1][1]) if curve else rate
        if curve and curve[-1][0] == flops:
            curve[-1] = (flops, rate)
        else:
            curve.append((flops, rate))
    return tuple(curve)


def gemm_rate_cap(device: str, dtype: str, flops: float, files: tuple[str, ...] = ()) -> float | None:
    """The measured FLOP/s of a ``dtype`` (bf16, fp16, fp8 with per-tensor scales) GEMM of ``flops`` FLOPs on
    ``device`` (its own rows and its generation's, scaled): log2-interpolated over the upper envelope of the tabled
    GEMMs, held at the ends; None where nothing is tabled. The rows of the files in ``COMMLENS_EFFICIENCY`` count
    too, and the GEMMs the accelerators ``files`` measured (their ``gemm:`` sections). [27 s10 gemmshape]"""
    return _cap(device, GEMM_DTYPES.get(dtype), float(flops), os.environ.get(EFFICIENCY_ENV, ""), tuple(files))


@lru_cache(maxsize=1 << 16)  # keyed by FLOPs: bounded for a long-running server
def _cap(device: str, kind: str | None, flops: float, env: str, files: tuple[str, ...] = ()) -> float | None:
    curve = _gemm_curve(device, kind, env, files) if kind else ()
    if not curve or flops <= 0:
        return None
    return _on_curve(list(curve), flops)


# MXFP8 quantize: bytes per element of one bf16 tensor cast into its row-wise and column-wise e4m3 copies and their
# E8M0 scales (one per 32 elements each), as kernels.FP8_RECIPES counts them [27 s10 mxcast]
MXFP8_QUANTIZE_BYTES = 2.0 + 1.0 + 1.0 + 2.0 / 32


@cache
def mxfp8_quantize_fit(device: str) -> tuple[float, float] | None:
    """(seconds per kernel, bytes per second) of Transformer Engine's MXFP8 quantize kernel on ``device``'s GPU
    generation: the least-squares line time = fixed + bytes / rate through the shipped ``mxfp8_quantize`` rows of
    that generation (efficiency.yaml, each with its origin); None where it has none. [27 s10 mxcast]"""
    from commlens.project.frameworks import generation

    data = _shipped_data()
    points: list[tuple[float, float]] = []
    for gpu, tables in (data.get("gpus") or {}).items():
        if not isinstance(tables, dict) or generation(str(gpu)) != generation(device):
            continue
        for i, row in enumerate(tables.get("mxfp8_quantize") or []):
            at = f"efficiency.yaml: {gpu}: mxfp8_quantize row {i + 1}"
            elements = _number(row.get("rows"), at) * _number(row.get("cols"), at)
            points.append((elements * MXFP8_QUANTIZE_BYTES, _number(row.get("us"), at) * 1e-6))
    return _line_fit(points)


def _line_fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The least-squares line time = fixed + bytes / rate through (bytes, seconds) ``points``: (fixed seconds, at
    least 0; bytes per second); None with fewer than two points or no positive slope."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx if sxx > 0 else 0.0
    if slope <= 0:
        return None
    return max(mean_y - slope * mean_x, 0.0), 1.0 / slope


@cache
def stream_kernel_fit(device: str) -> tuple[float, float] | None:
    """(seconds per kernel, bytes per second) of a fused streaming kernel on ``device``'s GPU generation: the
    least-squares line time = fixed + bytes / rate through the shipped ``stream_kernel`` rows of that generation
    (efficiency.yaml: kernel times at stated bytes, each with its origin); None where it has none. The fixed part
    is the kernel's own duration beyond its bytes (launch to first wave, the ramp and the tail), which a CUDA graph
    does not remove; the gap between one kernel and the next is kernels.KERNEL_GAP_S. The step model keeps its flat
    streaming rate (compute.stream_time_s): charging this line was measured against the published runs and not kept
    (docs/project-evidence.md [27 s11 streamfit]). [27 s11 streamfit]"""
    from commlens.project.frameworks import generation

    points: list[tuple[float, float]] = []
    for gpu, tables in (_shipped_data().get("gpus") or {}).items():
        if not isinstance(tables, dict) or generation(str(gpu)) != generation(device):
            continue
        for i, row in enumerate(tables.get("stream_kernel") or []):
            at = f"efficiency.yaml: {gpu}: stream_kernel row {i + 1}"
            points.append((_number(row.get("bytes"), at), _number(row.get("us"), at) * 1e-6))
    return _line_fit(points)


@cache
def stream_kernel_fixed_s(device: str) -> float:
    """The fixed seconds each streaming kernel takes on ``device`` beyond its bytes (:func:`stream_kernel_fit`);
    0 on a generation without measured rows (Ampere, Volta, CDNA: its kernels stay at bytes over the rate)."""
    fit = stream_kernel_fit(device)
    return fit[0] if fit is not None else 0.0
