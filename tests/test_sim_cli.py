"""``commlens sim``: its tables, JSON, plot, validation against the analytic model, and every error path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

COMMLENS = Path(sys.executable).with_name("commlens")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMMLENS), "sim", *args], capture_output=True, text=True, timeout=120)


def test_a_collective_prints_its_time_links_and_fabric() -> None:
    out = _run("collective", "-t", "dgx-h100", "-N", "4", "-b", "256M", "--algo", "ring")
    assert out.returncode == 0, out.stderr
    for header in ("collective", "time us", "analytic us", "slowdown", "busBW GB/s", "hottest links", "links by class"):
        assert header in out.stdout
    assert "fabric: 32 GPUs" in out.stdout


def test_json_with_no_contention_equals_the_analytic_model() -> None:
    out = _run("collective", "-t", "dgx-h100", "-N", "16", "--algo", "ring", "--routing", "spray", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["format"] == "commlens.sim/1"
    coll = doc["collectives"][0]
    assert coll["time_s"] == pytest.approx(coll["analytic_s"], rel=0.01)
    assert coll["ranks"] == 128


def test_both_routings_side_by_side_and_a_plot(tmp_path: Path) -> None:
    png = tmp_path / "sim.png"
    out = _run("collective", "-t", "h100-rail-2tier", "-N", "64", "--routing", "both", "--json", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)["runs"]
    assert [r["routing"] for r in runs] == ["ecmp", "spray"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert [p.name for p in tmp_path.iterdir()] == ["sim.png"]  # written by rename: no temporary file left


def test_the_plot_of_a_faulted_fabric_through_the_api(tmp_path: Path) -> None:
    import numpy as np

    from commlens.sim import Collective, SimConfig, SimOptions, parse_fault, run
    from commlens.sim.report import plot
    from commlens.topology import load_topology

    topo = load_topology("dgx-h100")
    groups = np.arange(64 * 8)[None, :]
    ring = Collective("ar", "all_reduce", 1 << 28, groups, algo="ring")
    result = run(SimConfig(topo, 64, (ring,), SimOptions(faults=(parse_fault("spine1", False),))))
    png = tmp_path / "faulted.png"
    plot(result, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_two_jobs_interleaved_collide_on_spines_under_ecmp_packed_do_not() -> None:
    def slowdown(placement: str, routing: str, channels: int = 1, seed: int = 0) -> float:
        out = _run(
            "collective", "-t", "h100-rail-2tier", "-N", "128", "--jobs", "2", "--placement", placement,
            "--algo", "ring", "--routing", routing, "--channels", str(channels), "--seed", str(seed), "--json",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return max(c["slowdown"] for c in json.loads(out.stdout)["collectives"])

    # packed: each job's rings stay under its own leaves; interleaved: they cross the spines, where ECMP hashes
    # some flows onto one uplink; spraying over every spine removes the collision (the fabric is non-blocking)
    assert slowdown("packed", "ecmp") == pytest.approx(1.0, rel=0.01)
    assert slowdown("interleaved", "ecmp") > 1.2  # one connection per NIC pair: two flows share an uplink
    assert slowdown("interleaved", "spray") == pytest.approx(1.0, rel=0.01)
    # NCCL's two channels per NIC halve what a collision costs: 1.43x where one channel cost 1.86x (seed 1)
    one, two = slowdown("interleaved", "ecmp", 1, seed=1), slowdown("interleaved", "ecmp", 2, seed=1)
    assert 1.0 < two < one, (one, two)


def test_a_failed_spine_is_reported_with_its_cables() -> None:
    out = _run("collective", "-t", "dgx-h100", "-N", "64", "--fail", "spine3", "--degrade", "leaf0-spine0:0.5")
    assert out.returncode == 0, out.stderr
    assert "fail spine3" in out.stdout and "degrade leaf0-spine0 to 0.5" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--fail", "spine999", "-N", "64"), "matches no switch"),
        (("--degrade", "leaf0-spine0:2"), "factor must be"),
        (("--degrade", "leaf0-spine0"), "expected NAME:FACTOR"),
        (("-N", "9000"), "exceed"),
        (("--routing", "adaptive"), "--routing"),
        (("-b", "12Q"), "--size"),
        (("--op", "gossip"), "gossip"),
        (("--jobs", "3", "-N", "4"), "--jobs"),
        (("--qps", "0"), "--qps: must be between 1 and 64, got 0"),
        (("--channels", "0"), "--channels: must be between 1 and 32, got 0"),
        (("--channels", "33"), "--channels: must be between 1 and 32"),
        (("--seed", "-1"), "--seed"),
        (("--ranks-per-node", "0"), "--ranks-per-node"),
        (("--placement", "diagonal", "--jobs", "2"), "--placement"),
        (("--plot", "/proc/no/such.png"), "--plot"),
        (("--algo", "nvls", "-t", "dgx-a100"), "nvls"),
        (("-t", "no-such-topology"), "no-such-topology"),
    ],
)
def test_bad_input_is_an_error_not_a_traceback(args: tuple[str, ...], message: str) -> None:
    out = _run("collective", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith("error: ") and message in out.stderr
    assert "Traceback" not in out.stderr


def test_fabric_lists_tiers_and_names() -> None:
    out = _run("fabric", "-t", "meta-h100-roce", "-N", "768")
    assert out.returncode == 0, out.stderr
    assert "rack" in out.stdout and "pod" in out.stdout and "aggregation" in out.stdout
    assert "node0.nic0" in out.stdout
    doc = json.loads(_run("fabric", "-t", "meta-h100-roce", "-N", "768", "--json").stdout)
    assert [t["name"] for t in doc["tiers"]] == ["rack", "pod", "aggregation"]


def test_a_step_simulates_and_compares_with_the_projection() -> None:
    out = _run(
        "step", "llama3-8b", "-t", "dgx-h100", "-n", "64", "--set", "layout.tp=4", "--set", "layout.pp=2",
        "--set", "workload.global_batch=32", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["step_time_s"] == pytest.approx(doc["projected_step_time_s"], rel=0.25)
    bad = _run("step", "llama3-8b", "-t", "dgx-h100", "-n", "64", "--set", "layout.tp=3")
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
