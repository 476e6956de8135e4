"""Values that would turn a check off or slip through: NaN and infinite bounds, booleans read as numbers,
repeated YAML keys, backends torch lists but cannot start, too-short timeouts, cluster names that are paths.

Each test gives what a user could type or write and asserts the refusal they see: ``error: ...`` naming the
option or field, exit code 2, nothing run or touched.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from commlens.bench.config import MIN_TIMEOUT_S, ConfigError, build_parser, config_from_args
from commlens.cli.app import _register, app
from commlens.cluster import ClusterError, ClusterSpec, load_state
from commlens.diagnose.stragglers import StragglerParams
from commlens.project import ProjectionError
from commlens.project.hardware import AcceleratorsFileError, load_accelerators_file
from commlens.project.layout import ParallelLayout
from commlens.project.sweep import parse_vary
from commlens.specdata import DuplicateKeyError, load_yaml
from commlens.topology import TopologyError, load_topology, topology_to_dict
from commlens.workload import WorkloadError, load_workload, workload_data

DATA = Path(__file__).parent / "data"
MODEL_RUN = DATA / "model" / "gloo-4ranks.json"
TRACES = sorted((DATA / "stragglers_late_rank1").glob("trace_rank*.json"))
_register()


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def refused(result, option: str) -> str:
    """The one ``error:`` line of a refused command, which names ``option``; exit code 2."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and option in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    return errors[0]


# ---- bounds of checks: NaN, infinities, out of range ------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "1", "0.5", "-2"])
def test_slow_factor_that_would_disable_the_check_is_refused(value: str) -> None:
    line = refused(run("diagnose", "stragglers", *map(str, TRACES), "--slow-factor", value), "--slow-factor")
    assert "finite number > 1" in line


def test_late_threshold_nan_is_refused() -> None:
    refused(run("diagnose", "stragglers", *map(str, TRACES), "--late-threshold-us", "nan"), "--late-threshold-us")


@pytest.mark.parametrize(
    "field, value",
    [("slow_factor", math.nan), ("slow_factor", math.inf), ("late_threshold_s", math.nan), ("end_spread_s", math.inf)],
)
def test_straggler_params_refuse_non_finite_thresholds(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        StragglerParams(**{field: value})


@pytest.mark.parametrize("value", ["nan", "-1", "inf"])
def test_max_mape_that_would_disable_the_gate_is_refused(value: str) -> None:
    # the fixture's MAPE exceeds 0.5 %, so a working gate fails it (exit 1); nan and -1 used to pass it (exit 0)
    line = refused(run("model", "check", str(MODEL_RUN), "--max-mape", value), "--max-mape")
    assert "finite number >= 0" in line
    assert run("model", "check", str(MODEL_RUN), "--max-mape", "0.5").exit_code == 1


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_diagnose_links_timeout_must_be_finite_and_positive(value: str) -> None:
    refused(run("diagnose", "links", "--nproc", "2", "--timeout", value), "--timeout")


def test_links_worker_under_torchrun_refuses_a_nan_timeout() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "commlens.diagnose.links", "--timeout", "nan"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "argument --timeout: must be a finite number of seconds > 0, got nan" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_calibrate_budget_nan_is_refused() -> None:
    refused(run("project", "calibrate", "--from", "x.json", "--budget-s", "nan"), "--budget-s")


# ---- bench: timeout and backends, refused before any rank starts ------------------------------------


def _cfg(*argv: str):
    return config_from_args(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize(
    "value, message",
    [
        ("nan", "finite number of seconds > 0, got nan"),
        ("inf", "finite number of seconds > 0, got inf"),
        ("-1", "> 0"),
        ("1", "too short for start-up"),
    ],
)
def test_bench_timeout_nan_inf_or_shorter_than_start_up_is_refused(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--timeout") as info:
        _cfg("--timeout", value)
    assert message in str(info.value)
    assert _cfg("--timeout", str(MIN_TIMEOUT_S)).timeout_s == MIN_TIMEOUT_S


@pytest.mark.parametrize(
    "backend, message",
    [
        ("ucc", "--backend ucc: registered in torch but not available"),
        ("xccl", "--backend xccl: registered in torch but not available"),
        ("mpi", "backend mpi is not available"),
    ],
)
def test_backends_torch_lists_but_cannot_start_here_are_refused(backend: str, message: str) -> None:
    import torch.distributed as dist

    if dist.is_backend_available(backend):
        pytest.skip(f"{backend} is available in this torch build")
    with pytest.raises(ConfigError, match=message):
        _cfg("--backend", backend)


def test_bench_with_an_unavailable_backend_exits_2_before_launch(tmp_path: Path) -> None:
    import torch.distributed as dist

    if dist.is_ucc_available():
        pytest.skip("ucc is available in this torch build")
    out = tmp_path / "run.json"
    result = run("bench", "--nproc", "2", "--backend", "ucc", "--json", str(out), "--db", str(tmp_path / "r.db"))
    refused(result, "--backend ucc")
    assert not out.exists() and not (tmp_path / "r.db").exists()


# ---- numbers in spec files: nan, inf, booleans ------------------------------------------------------


def _topology_file(tmp_path: Path, change) -> Path:
    data = topology_to_dict(load_topology("dgx-h100"))
    change(data)
    path = tmp_path / "topo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "field, change",
    [
        ("scale_up.bandwidth_bytes_per_s", lambda d: d["scale_up"].update(bandwidth_bytes_per_s=math.inf)),
        ("scale_out.nic_bandwidth_bytes_per_s", lambda d: d["scale_out"].update(nic_bandwidth_bytes_per_s=math.nan)),
        ("scale_up.latency_s", lambda d: d["scale_up"].update(latency_s=math.nan)),
        ("accelerators_per_node", lambda d: d.update(accelerators_per_node=True)),
        ("scale_up.domain_size", lambda d: d["scale_up"].update(domain_size=True)),
        ("scale_out.tiers[0].oversubscription", lambda d: d["scale_out"]["tiers"][0].update(oversubscription=True)),
    ],
)
def test_topology_refuses_nan_inf_and_booleans_as_numbers(tmp_path: Path, field: str, change) -> None:
    path = _topology_file(tmp_path, change)
    with pytest.raises(TopologyError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_topology(path)
    refused(run("topology", "show", str(path)), field)


def test_workload_refuses_booleans_and_infinities(tmp_path: Path) -> None:
    data = workload_data("llama3-8b")
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump({**data, "layers": True}))
    with pytest.raises(WorkloadError, match="layers: expected a number, got True"):
        load_workload(path)
    moe = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 1024, "capacity_factor": math.inf}
    path.write_text(yaml.safe_dump({**data, "moe": moe}))
    with pytest.raises(WorkloadError, match="moe.capacity_factor"):
        load_workload(path)


def test_accelerators_file_refuses_booleans_and_infinities(tmp_path: Path) -> None:
    path = tmp_path / "acc.yaml"
    path.write_text("format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    sms: true\n")
    with pytest.raises(AcceleratorsFileError, match="sms: expected a number, got True"):
        load_accelerators_file(path)
    path.write_text("format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    hbm_bytes: .inf\n")
    with pytest.raises(AcceleratorsFileError, match="hbm_bytes: Input should be a finite number"):
        load_accelerators_file(path)


def test_accelerators_gemm_shape_refuses_booleans(tmp_path: Path) -> None:
    path = tmp_path / "acc.yaml"
    for shape, message in (
        ("{k_overhead: true, tiles: [[128, 128, 1.0]], origin: x}", "k_overhead: expected a number"),
        ("{k_overhead: 1, tiles: [[true, 128, 1.0]], origin: x}", "tiles: a tile's sizes"),
    ):
        path.write_text(f"format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    gemm_shape: {shape}\n")
        with pytest.raises(AcceleratorsFileError, match=f"gemm_shape.{message}"):
            load_accelerators_file(path)


def test_layout_refuses_booleans_as_sizes() -> None:
    for field in ("tp", "zero", "grad_reduce_bytes"):
        with pytest.raises(ValueError, match=f"{field}: expected a number, got True"):
            ParallelLayout(**{field: True})
    assert ParallelLayout(sp=False).sp is False  # real booleans stay booleans


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gpus=true", "gpus must be a whole number"),
        ("gpus=4.5", "gpus must be a whole number"),
        ("gpus=0", "gpus must be a whole number"),
        ("topology.nic_gbps=true", "nic_gbps must be a number > 0"),
        ("topology.nic_gbps=.nan", "not a finite number"),
        ("workload.seq_len=.inf", "not a finite number"),
    ],
)
def test_sweep_values_that_slip_through_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ProjectionError, match=message):
        parse_vary([spec])


def test_project_set_gpus_true_exits_2() -> None:
    refused(run("project", "llama3-8b", "-t", "dgx-h100", "-n", "8", "--set", "gpus=true"), "gpus")


# ---- repeated YAML keys ----------------------------------------------------------------------------


def test_load_yaml_refuses_a_repeated_key_naming_it_and_both_lines() -> None:
    with pytest.raises(DuplicateKeyError, match=r"duplicate key 'latency_s' on line 4 \(first on line 2\)"):
        load_yaml("scale_up:\n  latency_s: 1.0e-6\n  name: x\n  latency_s: 2.0e-6\n")
    assert load_yaml("a: &a {x: 1}\nb:\n  <<: *a\n  x: 2\n") == {"a": {"x": 1}, "b": {"x": 2}}  # merge keys override
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object/apply:os.system ['true']")  # still yaml.safe_load: no python tags


def test_every_spec_loader_refuses_repeated_keys(tmp_path: Path) -> None:
    topo = tmp_path / "topo.yaml"
    text = yaml.safe_dump(topology_to_dict(load_topology("dgx-h100")), sort_keys=False)
    topo.write_text(text.replace("accelerators_per_node: 8\n", "accelerators_per_node: 8\naccelerators_per_node: 4\n"))
    with pytest.raises(TopologyError, match="duplicate key 'accelerators_per_node'"):
        load_topology(topo)
    refused(run("topology", "show", str(topo)), "duplicate key 'accelerators_per_node'")

    wl = tmp_path / "wl.yaml"
    wl.write_text(yaml.safe_dump(workload_data("llama3-8b"), sort_keys=False) + "layers: 2\n")
    with pytest.raises(WorkloadError, match="duplicate key 'layers'"):
        load_workload(wl)

    acc = tmp_path / "acc.yaml"
    acc.write_text("format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    sms: 132\n    sms: 1\n")
    with pytest.raises(AcceleratorsFileError, match="duplicate key 'sms' on line 5"):
        load_accelerators_file(acc)


# ---- the emulated cluster: rates and names ---------------------------------------------------------


@pytest.mark.parametrize("rate", [math.inf, math.nan, 0.0, -1.0])
def test_cluster_link_rate_must_be_finite_and_positive(rate: float) -> None:
    with pytest.raises(ValueError, match="link rate must be a finite number > 0"):
        ClusterSpec(name="c", hosts=2, link_bytes_per_s=rate)


@pytest.mark.parametrize("value", ["inf", "nan", "0"])
def test_cluster_up_link_gbps_inf_or_nan_exits_2(tmp_path: Path, value: str) -> None:
    env = {"COMMLENS_CLUSTER_DIR": str(tmp_path / "state")}
    refused(run("cluster", "up", "c", "--hosts", "2", "--link-gbps", value, env=env), "--link-gbps")
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("command", [["down"], ["status"], ["set", "--link-gbps", "2"]])
def test_cluster_commands_refuse_a_name_that_is_a_path(tmp_path: Path, command: list[str]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    # a well-formed state file outside the state directory: `down ../victim` used to read it, and remove it
    victim = tmp_path / "victim.json"
    victim.write_text(
        json.dumps(
            {
                "format": "commlens.cluster/1",
                "name": "victim",
                "status": "up",
                "hosts": 2,
                "link_bytes_per_s": 1.25e8,
                "ranks_per_host": 1,
                "subnet_index": 7,
                "faults": {"slow_hosts": [], "slow_links": [], "starved_hosts": []},
                "created": [],
            }
        )
    )
    before = victim.read_text()
    env = {"COMMLENS_CLUSTER_DIR": str(state)}
    line = refused(run("cluster", command[0], "../victim", *command[1:], env=env), "cluster name '../victim'")
    assert "lower-case letters, digits and '-'" in line
    refused(run("cluster", command[0], "--name", "../../etc/x", *command[1:], env=env), "cluster name")
    assert victim.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "victim.json"]


def test_load_state_refuses_a_path_as_a_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMLENS_CLUSTER_DIR", str(tmp_path / "state"))
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ClusterError, match="cluster name '../x'"):
        load_state("../x")


def test_specdata_is_a_leaf_so_topology_and_cluster_still_import_nothing_else_of_commlens() -> None:
    import ast

    src = Path(__file__).resolve().parents[1] / "src" / "commlens"

    def commlens_imports(path: Path) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("commlens"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("commlens")}
        return found

    leaves = ("commlens.specdata", "commlens.errors", "commlens._lazy")
    for leaf in leaves:
        assert commlens_imports(src / f"{leaf.removeprefix('commlens.')}.py") == set(), leaf
    for package in ("topology", "cluster"):
        for path in (src / package).rglob("*.py"):
            outside = {
                m
                for m in commlens_imports(path)
                # the leaves any stage may import (see test_layering): spec loading, the error base, lazy exports
                if not m.startswith(f"commlens.{package}") and m not in leaves
            }
            assert not outside, f"{path.relative_to(src)} imports {outside}"


@pytest.mark.parametrize(
    "option, text", [("--slow-host", "1:nan"), ("--slow-link", "0-1:inf"), ("--cpu-starve", "1:nan")]
)
def test_cluster_fault_fractions_nan_or_inf_exit_2(tmp_path: Path, option: str, text: str) -> None:
    env = {"COMMLENS_CLUSTER_DIR": str(tmp_path / "state")}
    line = refused(run("cluster", "up", "c", "--hosts", "2", option, text, env=env), "fraction must be in")
    assert "nan" in line or "inf" in line
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("option, value", [("--top", "0"), ("--top", "-1"), ("--workers", "-1"), ("--workers", "0")])
def test_project_sweep_counts_must_be_positive(option: str, value: str) -> None:
    # --top -1 used to slice off the last row; --workers 0 quietly meant "all cores"
    refused(run("project", "sweep", "llama3-8b", "-t", "dgx-h100", "-n", "8", option, value), option)


def test_the_package_files_read_alike_through_the_fast_loader_and_it_still_refuses_a_repeated_key() -> None:
    """Shipped YAML goes through libyaml's composer (the projection's start-up needs it): every file the
    package ships gives the same data both ways, and a repeated key is refused on that path too."""
    files = sorted((Path(__file__).resolve().parents[1] / "src" / "commlens").rglob("*.yaml"))
    assert len(files) >= 20
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert load_yaml(text, shipped=True) == load_yaml(text), path.name
    with pytest.raises(DuplicateKeyError, match="duplicate key 'a' on line 3"):
        load_yaml("a: 1\nb: 2\na: 3\n", shipped=True)
