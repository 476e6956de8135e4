"""Benchmark options: sizes with suffixes, the sweep nccl-tests would run, refusals that name the bad value."""

from __future__ import annotations

import pytest

from commlens.bench.config import BenchConfig, ConfigError, build_parser, config_from_args
from commlens.results.units import format_size, parse_size


def _cfg(*argv: str) -> BenchConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize(
    "text, size",
    [
        ("8", 8),
        ("1K", 1024),
        ("1k", 1024),
        ("64M", 64 << 20),
        ("1G", 1 << 30),
        ("1.5K", 1536),
        ("2KB", 2048),
        ("0", 0),
        ("512B", 512),
    ],
)
def test_size_suffixes_are_powers_of_1024(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["12x", "-1", "K", "0.5", "1.1K", ""])
def test_bad_sizes_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


def test_format_size_round_trips_exact_powers() -> None:
    assert [format_size(s) for s in (8, 1024, 1536, 64 << 20, 1 << 30)] == ["8", "1K", "1536", "64M", "1G"]


@pytest.mark.parametrize(
    "argv, sizes",
    [
        (["-b", "8", "-e", "128"], [8, 16, 32, 64, 128]),
        (["-b", "8", "-e", "100"], [8, 16, 32, 64]),  # stops at the last size <= max
        (["-b", "1K", "-e", "1M", "-f", "4"], [1024, 4096, 16384, 65536, 262144, 1048576]),
        (["-b", "100", "-e", "450", "-i", "100"], [100, 200, 300, 400]),
        (["-b", "1K", "-e", "3K", "-i", "1K", "-f", "8"], [1024, 2048, 3072]),  # -i overrides -f
        (["-b", "64"], [64]),  # -e defaults to -b
        (["-b", "0", "-e", "0"], [0]),
    ],
)
def test_sweep_sizes(argv: list[str], sizes: list[int]) -> None:
    assert list(_cfg(*argv).sizes()) == sizes


def test_defaults_and_lists() -> None:
    cfg = _cfg()
    assert (cfg.ops, cfg.dtypes, cfg.redops, cfg.roots) == (("all_reduce",), ("float32",), ("sum",), (0,))
    assert (cfg.iters, cfg.warmup, cfg.check_iters, cfg.backend, cfg.device) == (20, 5, 1, "gloo", "cpu")
    assert cfg.placements() == [False, True]  # out-of-place first, as nccl-tests prints
    cfg = _cfg(
        "--op",
        "alltoall,allreduce",
        "-d",
        "half,bf16,int8",
        "-o",
        "max,min",
        "-r",
        "1,2",
        "--in-place",
        "-n",
        "7",
        "-w",
        "0",
        "-c",
        "0",
        "--tag",
        "t1",
        "--revision",
        "abc",
    )
    assert cfg.ops == ("all_to_all", "all_reduce")
    assert cfg.dtypes == ("float16", "bfloat16", "int8")
    assert cfg.redops == ("max", "min")
    assert cfg.roots == (1, 2)
    assert cfg.placements() == [True]
    assert (cfg.iters, cfg.warmup, cfg.check_iters) == (7, 0, 0)
    assert cfg.extra == {"tag": "t1", "revision": "abc"}
    assert _cfg("--out-of-place").placements() == [False]
    all_cfg = _cfg("-d", "all", "-o", "all", "-r", "all")
    assert len(all_cfg.dtypes) == 8 and len(all_cfg.redops) == 5
    assert all_cfg.roots == "all"  # every rank, resolved once the world size is known


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--op", "all_reduce,bogus"], "unknown op 'bogus'"),
        (["-d", "float7"], "unknown dtype 'float7'"),
        (["-o", "mean"], "unknown reduction 'mean'"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["-b", "1K", "-e", "8"], "min size 1024 B is larger than max size 8 B"),
        (["-b", "8", "-e", "64", "-f", "1"], "--step-factor"),
        (["-n", "0"], "--iters"),
        (["-w", "-1"], "--warmup"),
        (["--timeout", "0"], "--timeout"),
        (["-r", "x"], "invalid --root 'x'"),
        (["-r", "-1"], "--root"),
        (["-b", "12x"], "invalid size '12x'"),
    ],
)
def test_bad_settings_name_the_bad_value(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _cfg(*argv)
    assert message in str(info.value)
