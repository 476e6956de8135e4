"""Compute figures of accelerators (peak FLOP/s, HBM, SMs, achievable fractions), as data.

Topologies describe what moves bytes between ranks; the projection also needs
what computes. Both are keyed by the topology's ``accelerator.name``; the
figures live in ``accelerators.yaml`` next to this module, each efficiency with
its origin. A topology whose accelerator is not listed cannot be projected
(:class:`ProjectionError` names the known ones).

Files in the same schema (``format: commlens.accelerators/1``), such as the
fragment ``commlens project calibrate`` writes, override or add entries: list
them in ``COMMLENS_ACCELERATORS`` (paths separated by ``os.pathsep``, later
files win), or pass them as ``files`` (the CLI's ``--accelerators FILE``). An entry for a known
accelerator may give only the fields it changes, but an efficiency always comes
with its ``*_origin``; a new accelerator gives every field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from commlens.project.errors import ProjectionError
from commlens.specdata import DuplicateKeyError, StrictSpec, load_yaml

__all__ = [
    "ACCELERATORS_ENV",
    "ACCELERATORS_FORMAT",
    "AcceleratorsFileError",
    "Device",
    "GemmShape",
    "accelerator_files",
    "active_devices",
    "device_for",
    "known_devices",
    "load_accelerators_file",
]

ACCELERATORS_FORMAT = "commlens.accelerators/1"
ACCELERATORS_ENV = "COMMLENS_ACCELERATORS"


class AcceleratorsFileError(ProjectionError):
    """An accelerators file that cannot be used; the message names the file and the field."""


class GemmShape(StrictSpec):
    """Calibrated shape terms of the GEMM curve (:mod:`commlens.project.compute`); absent: its defaults."""

    k_overhead: float = Field(ge=0, le=4096, description="elements of K a tile spends in prologue and epilogue")
    tiles: tuple[tuple[int, int, float], ...] = Field(
        min_length=1, description="(tile rows, tile cols, relative throughput in (0, 1]) the library picks from"
    )
    origin: str = Field(min_length=1, description="where these come from")

    @field_validator("tiles", mode="before")
    @classmethod
    def _tiles_are_numbers(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)) and any(
            isinstance(x, bool) for tile in v if isinstance(tile, (list, tuple)) for x in tile
        ):
            raise ValueError("a tile's sizes and throughput are numbers, not true/false")
        return v

    @field_validator("tiles")
    @classmethod
    def _tiles_positive(cls, v: tuple[tuple[int, int, float], ...]) -> tuple[tuple[int, int, float], ...]:
        for rows, cols, rel in v:
            if rows < 1 or cols < 1 or not 0 < rel <= 1:
                raise ValueError(f"tile {rows}x{cols} at {rel}: sizes must be >= 1 and throughput in (0, 1]")
        return v


class Device(StrictSpec):
    """One accelerator's compute figures."""

    name: str = Field(description="the topology's accelerator.name")
    peak_flops: dict[str, float] = Field(description="dense peak FLOP/s per GEMM precision (bf16, fp8)")
    hbm_bytes: float = Field(gt=0, description="HBM capacity as PyTorch sees it (get_device_properties().total_memory)")
    hbm_bytes_origin: str = Field(default="", description="where hbm_bytes comes from")
    hbm_bytes_per_s: float = Field(gt=0, description="HBM bandwidth")
    sms: int = Field(ge=1, description="streaming multiprocessors (for wave quantization of GEMM tiles)")
    gemm_efficiency: float = Field(gt=0, le=1, description="fraction of peak a large GEMM reaches")
    gemm_efficiency_origin: str = Field(min_length=1, description="where gemm_efficiency comes from")
    gemm_efficiency_by_cuda: dict[str, float] = Field(
        default_factory=dict,
        description="the bf16 plateau measured under an older CUDA toolkit, by version (e.g. '12.1'): what a stack "
        "whose profile names that `cuda` reaches instead of gemm_efficiency [27 s14 h100fsdp]",
    )
    gemm_efficiency_by_cuda_origin: str = Field(default="", description="where gemm_efficiency_by_cuda comes from")
    fp8_gemm_efficiency: float | None = Field(
        None, gt=0, le=1, description="the plateau for fp8 GEMMs, of the fp8 peak (None: as gemm_efficiency)"
    )
    fp8_gemm_efficiency_origin: str = Field(default="", description="where fp8_gemm_efficiency comes from")
    fp8_gemm_efficiency_by_cuda: dict[str, float] = Field(
        default_factory=dict,
        description="the fp8 plateau measured under an older CUDA toolkit, by version, of the fp8 peak: what the fp8 "
        "GEMMs of a stack whose profile names that `cuda` reach instead of fp8_gemm_efficiency [27 s15 h100fp8cuda]",
    )
    fp8_gemm_efficiency_by_cuda_origin: str = Field(
        default="", description="where fp8_gemm_efficiency_by_cuda comes from"
    )
    nvfp4_gemm_rate: float | None = Field(
        None,
        gt=0,
        description="throughput of NVFP4 GEMMs (Transformer Engine's NVFP4BlockScaling: 1x16 blocks, E4M3 scales) "
        "against per-tensor fp8 GEMMs of the same shapes on this GPU, kernels only; None: no NVFP4 tensor cores "
        "(fp8_recipe nvfp4 refused) [27 s25 nvfp4]",
    )
    nvfp4_gemm_rate_origin: str = Field(default="", description="where nvfp4_gemm_rate comes from")
    attention_sustained: float = Field(
        1.0,
        gt=0,
        le=1,
        description="fraction of a tabled attention rate the GPU keeps when it runs for seconds at its power limit: "
        "the attention tables are short benchmark runs at boost clock (1: no sustained measurement) [27 s20 attsust]",
    )
    attention_sustained_origin: str = Field(default="", description="where attention_sustained comes from")
    memory_efficiency: float = Field(gt=0, le=1, description="fraction of HBM bandwidth streaming kernels reach")
    memory_efficiency_origin: str = Field(min_length=1, description="where memory_efficiency comes from")
    gemm_shape: GemmShape | None = Field(None, description="calibrated tile throughputs and K overhead")
    host_op_factor: float = Field(
        1.0, gt=0, description="host CPU time to issue one op, relative to the x86 hosts of a DGX H100 (Grace: ~2.75)"
    )
    host_op_factor_origin: str = Field(default="", description="where host_op_factor comes from")
    host_link_bytes_per_s: float = Field(
        0.0,
        ge=0,
        description="the GPU's host link, bytes per second each way (PCIe line rate); 0: not given, host copies unpriced",
    )
    host_link_bytes_per_s_origin: str = Field(default="", description="where host_link_bytes_per_s comes from")

    @field_validator("peak_flops")
    @classmethod
    def _has_bf16(cls, v: dict[str, float]) -> dict[str, float]:
        if "bf16" not in v or any(x <= 0 for x in v.values()):
            raise ValueError("needs a positive bf16 peak (and optionally fp8)")
        return v

    def peak(self, precision: str) -> float:
        """Peak FLOP/s at ``precision``; :class:`ProjectionError` when the device has none."""
        try:
            return self.peak_flops[precision]
        except KeyError:
            raise ProjectionError(
                f"{self.name} has no {precision} tensor cores (has: {', '.join(self.peak_flops)})"
            ) from None


_FIELDS = tuple(f for f in Device.model_fields if f != "name")


def _entries(data: Any, source: str, base: Mapping[str, Device]) -> dict[str, Device]:
    """Validate one parsed file: every entry a Device, partial entries merged onto ``base``."""
    if not isinstance(data, dict):
        raise AcceleratorsFileError(f"{source}: expected a mapping with 'format' and 'accelerators'")
    # attention, gemm: measured attention kernels and GEMMs (commlens project calibrate), read by
    # commlens.project.efficiency
    unknown = sorted(set(data) - {"format", "accelerators", "attention", "gemm"})
    if unknown:
        raise AcceleratorsFileError(
            f"{source}: unknown key {unknown[0]!r} (known: format, accelerators, attention, gemm)"
        )
    if data.get("format") != ACCELERATORS_FORMAT:
        raise AcceleratorsFileError(f"{source}: format {data.get('format')!r}; expected {ACCELERATORS_FORMAT}")
    entries = data.get("accelerators")
    if not isinstance(entries, dict) or not entries:
        raise AcceleratorsFileError(f"{source}: 'accelerators' must map accelerator names to their figures")
    out: dict[str, Device] = {}
    for name, fields in entries.items():
        where = f"{source}: accelerators.{name!r}"
        if not isinstance(fields, dict):
            raise AcceleratorsFileError(f"{where}: expected a mapping of fields")
        unknown = [k for k in fields if k not in _FIELDS]
        if unknown:
            raise AcceleratorsFileError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(_FIELDS)})")
        merged = dict(fields)
        if name in base:
            for eff in (
                "gemm_efficiency",
                "fp8_gemm_efficiency",
                "memory_efficiency",
                "attention_sustained",
                "nvfp4_gemm_rate",
            ):
                if eff in fields and f"{eff}_origin" not in fields:
                    raise AcceleratorsFileError(f"{where}.{eff}: given without {eff}_origin (say where it comes from)")
            merged = {**base[name].model_dump(exclude={"name"}), **fields}
        try:
            out[name] = Device(name=str(name), **merged)
        except ValidationError as e:
            missing = [str(err["loc"][0]) for err in e.errors() if err["type"] == "missing"]
            if missing:
                raise AcceleratorsFileError(
                    f"{where}: missing {', '.join(missing)} (a new accelerator gives every field)"
                ) from None
            first = e.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            msg = first["msg"].removeprefix("Value error, ")
            more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
            if re.match(r"^[a-z_][a-z0-9_]*: ", msg):  # a check that names its field within its model
                loc = f"{loc}.{msg.split(': ', 1)[0]}" if loc else msg.split(": ", 1)[0]
                msg = msg.split(": ", 1)[1]
            raise AcceleratorsFileError(f"{where}.{loc}: {msg}{more}") from None
    return out


def _read_yaml(path: Path, source: str) -> Any:
    import yaml

    try:
        return load_yaml(path.read_text())
    except OSError as e:
        raise AcceleratorsFileError(f"{source}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise AcceleratorsFileError(f"{source}: not UTF-8 text (byte {e.start})") from None
    except DuplicateKeyError as e:
        raise AcceleratorsFileError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        raise AcceleratorsFileError(f"{source}: not valid YAML: {e}") from None


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Device]:
    text = (resources.files("commlens.project") / "accelerators.yaml").read_text()
    return _entries(load_yaml(text, shipped=True), "accelerators.yaml", {})


def load_accelerators_file(path: str | Path, base: Mapping[str, Device] | None = None) -> dict[str, Device]:
    """The entries of one accelerators file, validated; partial entries complete themselves from ``base``
    (default: the shipped figures). :class:`AcceleratorsFileError` names the file and the field."""
    from commlens.project.efficiency import check_measured_sections  # efficiency imports this module

    p = Path(path)
    data = _read_yaml(p, str(path))
    out = _entries(data, str(path), _shipped() if base is None else base)
    check_measured_sections(data, str(path))
    return out


@lru_cache(maxsize=8)
def _with_files(files: tuple[tuple[str, int], ...]) -> dict[str, Device]:
    devices = dict(_shipped())
    for path, _mtime in files:
        devices.update(load_accelerators_file(path, devices))
    return devices


def accelerator_files(path: str | Path | None = None) -> tuple[str, ...]:
    """The accelerators files in force: ``path`` alone when given (``--accelerators``), else those listed in
    ``COMMLENS_ACCELERATORS``. A given path that is not a file raises :class:`AcceleratorsFileError`."""
    if path is not None:
        if not Path(path).is_file():
            raise AcceleratorsFileError(f"--accelerators {path}: no such file")
        return (str(Path(path).resolve()),)
    return tuple(p for p in os.environ.get(ACCELERATORS_ENV, "").split(os.pathsep) if p)


def active_devices(files: Sequence[str] | None = None) -> dict[str, Device]:
    """The shipped figures, overridden and extended by ``files`` in order (default: :func:`accelerator_files`)."""
    from_env = files is None
    files = accelerator_files() if files is None else files
    stamped = []
    for path in files:
        try:
            stamped.append((path, os.stat(path).st_mtime_ns))
        except OSError as e:
            where = f" (from {ACCELERATORS_ENV})" if from_env else ""
            raise AcceleratorsFileError(f"{path}{where}: cannot read: {e.strerror or e}") from None
    return _with_files(tuple(stamped))


def known_devices(files: Sequence[str] | None = None) -> list[str]:
    return sorted(active_devices(files))


def device_for(accelerator_name: str, files: Sequence[str] | None = None) -> Device:
    """The compute figures of ``accelerator_name``: shipped, or from ``files`` (default: :func:`accelerator_files`)."""
    devices = active_devices(files)
    try:
        return devices[accelerator_name]
    except KeyError:
        raise ProjectionError(
            f"no compute figures for accelerator {accelerator_name!r}; known: {', '.join(sorted(devices))}"
        ) from None
