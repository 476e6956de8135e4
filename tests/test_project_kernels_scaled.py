"""A hybrid block's kernels scaled by a share keep every field of :class:`Kernel` (``kernels._scaled`` builds
them field by field)."""

from dataclasses import fields

from commlens.project.kernels import Kernel, _scaled


def test_scaled_kernel_keeps_every_field():
    k = Kernel("qkv", "gemm", 2.0, 4.0, 3.0, True, 8.0, 16.0, 5.0, 7.0)
    assert all(getattr(k, f.name) != f.default for f in fields(Kernel))  # every field set away from its default
    assert _scaled(k, 1.0) == k
    half = _scaled(k, 0.5)
    assert (half.name, half.kind, half.eager) == ("qkv", "gemm", True)
    assert (half.fwd_s, half.bwd_s, half.launches, half.flops, half.nbytes, half.modules, half.bwd_launches) == (
        1.0,
        2.0,
        1.5,
        4.0,
        8.0,
        2.5,
        3.5,
    )
