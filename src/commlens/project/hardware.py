"""Compute figures of accelerators (peak FLOP/s, HBM, SMs, achievable fractions), as data.

Topologies describe what moves bytes between ranks; the projection also needs
what computes. Both are keyed by the topology's ``accelerator.name``; the
figures live in ``accelerators.yaml`` next to this module, each efficiency with
its origin. A topology whose accelerator is not listed cannot be projected
(:class:`ProjectionError` names the known ones).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from commlens.project.errors import ProjectionError

__all__ = ["Device", "device_for", "known_devices"]


class Device(BaseModel):
    """One accelerator's compute figures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the topology's accelerator.name")
    peak_flops: dict[str, float] = Field(description="dense peak FLOP/s per GEMM precision (bf16, fp8)")
    hbm_bytes: float = Field(gt=0, description="HBM capacity")
    hbm_bytes_per_s: float = Field(gt=0, description="HBM bandwidth")
    sms: int = Field(ge=1, description="streaming multiprocessors (for wave quantization of GEMM tiles)")
    gemm_efficiency: float = Field(gt=0, le=1, description="fraction of peak a large GEMM reaches")
    gemm_efficiency_origin: str = Field(min_length=1, description="where gemm_efficiency comes from")
    memory_efficiency: float = Field(gt=0, le=1, description="fraction of HBM bandwidth streaming kernels reach")
    memory_efficiency_origin: str = Field(min_length=1, description="where memory_efficiency comes from")

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
            raise ProjectionError(f"{self.name} has no {precision} tensor cores "
                                  f"(has: {', '.join(self.peak_flops)})") from None


@lru_cache(maxsize=1)
def _devices() -> dict[str, Device]:
    import yaml

    text = (resources.files("commlens.project") / "accelerators.yaml").read_text()
    data = yaml.safe_load(text)
    try:
        return {name: Device(name=name, **fields) for name, fields in data["accelerators"].items()}
    except ValidationError as e:
        raise ProjectionError(f"accelerators.yaml: {e}") from None


def known_devices() -> list[str]:
    return sorted(_devices())


def device_for(accelerator_name: str) -> Device:
    """The compute figures of ``accelerator_name``."""
    try:
        return _devices()[accelerator_name]
    except KeyError:
        raise ProjectionError(f"no compute figures for accelerator {accelerator_name!r}; "
                              f"known: {', '.join(known_devices())}") from None
