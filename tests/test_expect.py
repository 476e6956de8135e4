"""commlens expect: the system inferred from a run's log, the band, the verdict per range, causes with evidence."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commlens import expect
from commlens.cli.app import _register, app
from commlens.expect import ExpectError, ExpectRequest, judge_run, log_facts, with_log_facts
from commlens.expect import tables as tables_mod
from commlens.expect.causes import causes_table
from commlens.expect.verdict import judge
from commlens.model.layout import build_layout
from commlens.model.predict import predict
from commlens.ops import get_op
from commlens.results.records import Measurement, Run, SystemInfo
from commlens.results.stats import TimeStats
from commlens.topology import list_presets, load_topology, topology_from_dict
from commlens.topology.plain import plain_topology

_register()
EFA_299 = "nccltests/aws-efa-eks-p4d-16rank-2node-tagoutput-nccl2.9.9-2022.log"
EFA_283 = "nccltests/aws-efa-eks-p4d-16rank-2node-tagoutput-nccl2.8.3-2021.log"


def _run(gpu: str, hosts: int, per_host: int, op: str, rows: list[tuple[int, float]], env: dict | None = None) -> Run:
    """A run as the nccl-tests reader stores one: out-of-place rows at the time giving each busBW (GB/s)."""
    world = hosts * per_host
    spec = get_op(op)
    names = tuple(f"h{i}" for i in range(hosts))
    ms = []
    for size, busbw in rows:
        t = size / (busbw * 1e9 / spec.busbw_factor(world))
        stats = TimeStats(
            mean_s=t, p50_s=None, p95_s=None, p99_s=None, min_s=None, max_s=None, stdev_s=None, cv=None, n=20
        )
        ms.append(
            Measurement(
                op=op,
                dtype="float32",
                size_bytes=size,
                count=size // 4,
                in_place=False,
                world_size=world,
                samples_s=(),
                redop="sum" if spec.reduces else None,
                root=0 if spec.has_root else None,
                reported=stats,
            )
        )
    system = SystemInfo(
        world_size=world,
        hosts=names,
        ranks_per_host={h: per_host for h in names},
        backend="nccl",
        device="cuda",
        device_names=(gpu,) * world,
        env=env or {},
    )
    return Run(run_id="r" * 32, started_at="2025-01-01T00:00:00+00:00", system=system, measurements=tuple(ms))


def test_efa_log_is_judged_normal_with_the_nics_read_from_its_ofi_line(realdata: Path) -> None:
    path = realdata / EFA_299
    result = CliRunner().invoke(app, ["expect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "normal"
    nics = next(n for n in doc["system"]["inferred"] if n["what"] == "NICs")
    assert nics["value"] == "4 x 100 Gb/s"
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "Selected Provider is efa" in ln)
    assert nics["source"].startswith(f"line {line}: ")
    large = next(r for r in doc["ranges"] if r["range"] == "bandwidth-bound")
    assert large["limit"].startswith("NIC bandwidth") and large["max_size_bytes"] == 4 << 30


def test_fail_below_gates_on_the_shortfall(realdata: Path) -> None:
    path = str(realdata / EFA_283)
    failed = CliRunner().invoke(app, ["expect", path, "--fail-below", "5"])
    assert failed.exit_code == 1
    assert "is below expectation by 13% (more than 5%)" in failed.output
    assert CliRunner().invoke(app, ["expect", path, "--fail-below", "20"]).exit_code == 0
    assert CliRunner().invoke(app, ["expect", path, "--fail-below", "150"]).exit_code == 2


def test_ingested_run_keeps_its_log_facts_and_show_prints_the_verdict(realdata: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    stored = CliRunner().invoke(app, ["ingest", str(realdata / EFA_299), "--db", db])
    assert stored.exit_code == 0, stored.output
    assert "# expect: normal (all_reduce, bandwidth-bound sizes, 89% of the model" in stored.stdout
    run_id = stored.stdout.split("stored run ")[1].split()[0]
    shown = CliRunner().invoke(app, ["show", run_id[:12], "--db", db])
    lines = shown.stdout.splitlines()
    assert (
        "#   all_reduce 8M-4G (bandwidth-bound): normal, 89% of the model; limit NIC bandwidth (AWS p4d: 4 x 100 Gb/s EFA)"
        in lines
    )
    assert lines[-1].startswith("# status complete")
    # judged again from the store alone: the EFA NICs come from the facts kept with the run, not from the file
    again = json.loads(CliRunner().invoke(app, ["expect", run_id[:12], "--db", db, "--json"]).stdout)
    assert next(n for n in again["system"]["inferred"] if n["what"] == "NICs")["value"] == "4 x 100 Gb/s"


def test_ingest_fail_below_is_a_gate_and_refuses_a_bad_percentage_before_storing(
    realdata: Path, tmp_path: Path
) -> None:
    path = str(realdata / EFA_283)
    gated = CliRunner().invoke(app, ["ingest", path, "--db", f"sqlite:///{tmp_path / 'a.db'}", "--fail-below", "5"])
    assert gated.exit_code == 1
    assert "stored run" in gated.stdout  # stored all the same: the gate judges, it does not lose the run
    assert "is below expectation by 13% (more than 5%)" in gated.output
    passed = CliRunner().invoke(app, ["ingest", path, "--db", f"sqlite:///{tmp_path / 'b.db'}", "--fail-below", "20"])
    assert passed.exit_code == 0, passed.output
    bad = CliRunner().invoke(app, ["ingest", path, "--db", f"sqlite:///{tmp_path / 'c.db'}", "--fail-below", "150"])
    assert bad.exit_code == 2 and "--fail-below 150" in bad.output
    assert not (tmp_path / "c.db").exists()


def test_bench_fail_below_is_refused_out_of_range() -> None:
    from commlens.bench.config import ConfigError
    from commlens.cli.bench_cmd import launch

    with pytest.raises(ConfigError, match="--fail-below 120"):
        launch(["--backend", "gloo", "--nproc", "2", "--no-store", "--fail-below", "120"])


def test_show_prints_the_verdict_kept_at_ingest_and_judges_again_when_the_model_changed(
    realdata: Path, tmp_path: Path
) -> None:
    import dataclasses
    import subprocess
    import sys

    from commlens.cli.expect_cmd import VERDICT_KEY, model_stamp
    from commlens.ingest import load_runs
    from commlens.store import Store

    db = f"sqlite:///{tmp_path / 'k.db'}"
    run = with_log_facts(load_runs(realdata / EFA_299)[0], (realdata / EFA_299).read_text())

    def keep(run_id: str, stamp: str) -> None:
        kept = {"stamp": stamp, "status": "normal", "pct": 0.0, "lines": [f"# expect: kept {stamp}"], "short": []}
        system = dataclasses.replace(run.system, extra={**run.system.extra, VERDICT_KEY: kept})
        with Store.open(db) as store:
            store.save_run(dataclasses.replace(run, run_id=run_id, system=system))

    keep("a" * 32, model_stamp())
    keep("b" * 32, "0" * 16)  # kept by another model version
    code = (
        "import sys; from commlens.cli.app import main; sys.argv = ['commlens', 'show', sys.argv[1], '--db', sys.argv[2]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('MODEL', 'commlens.topology' in sys.modules, 'commlens.expect' in sys.modules)\n"
    )
    current = subprocess.run([sys.executable, "-c", code, "a" * 12, db], capture_output=True, text=True, check=True)
    assert f"# expect: kept {model_stamp()}" in current.stdout.splitlines()
    assert "MODEL False False" in current.stdout  # the kept lines, printed without importing the model
    stale = subprocess.run([sys.executable, "-c", code, "b" * 12, db], capture_output=True, text=True, check=True)
    assert "kept 0000" not in stale.stdout
    assert "# expect: normal (all_reduce, bandwidth-bound sizes, 89% of the model" in stale.stdout


def test_socket_transport_is_named_first_with_its_log_line() -> None:
    log = "\n".join(
        [
            "node1:7:7 [0] NCCL INFO NET/IB : No device found.",
            "node1:7:7 [0] NCCL INFO NET/Socket : Using [0]eno1:10.0.0.1<0>",
            "node1:7:7 [0] NCCL INFO Using network Socket",
            "NCCL version 2.21.5+cuda12.4",
        ]
    )
    run = with_log_facts(_run("NVIDIA A100-SXM4-80GB", 2, 8, "all_reduce", [(1 << 30, 2.4), (1 << 31, 2.5)]), log)
    v = expect.run(ExpectRequest(run))
    assert v.status == "below" and v.pct > 90
    assert v.causes[0].id == "net-socket"
    assert v.causes[0].evidence[0] == "line 3: node1:7:7 [0] NCCL INFO Using network Socket"


def test_gdr_read_from_connection_lines() -> None:
    on = log_facts("h:1:2 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/3/GDRDMA")
    off = log_facts("h:1:2 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/3")
    efa = log_facts("x:1:2 [6] NCCL INFO Channel 03 : 15[a01d0] -> 6[a01c0] [receive] via NET/AWS Libfabric/3/GDRDMA")
    assert [f.value for f in on if f.name == "gdr"] == [True]
    assert [f.value for f in off if f.name == "gdr"] == [False]
    assert [f.value for f in efa if f.name == "gdr"] == [True]
    run = with_log_facts(
        _run("NVIDIA A100-SXM4-80GB", 4, 8, "all_reduce", [(1 << 30, 60.0)]),
        "\n".join(
            [
                "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0",
                "h:1:2 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/3",
            ]
        ),
    )
    v = expect.run(ExpectRequest(run))
    assert v.status == "below"
    assert v.causes[0].id == "gdr-off" and v.causes[0].evidence[0].startswith("line 2: ")
    assert any(n.what == "NICs per node" and n.value == "4" for n in v.system.inferred)


def test_gdr_on_one_host_only_is_named_from_the_line_without_it() -> None:
    shared = log_facts("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA/Shared")
    assert [f.value for f in shared if f.name == "gdr"] == [True] and not [f for f in shared if f.name == "gdr_partial"]
    text = "\n".join(
        [
            "a:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0",
            "a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
            "b:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/IB/0",
        ]
    )
    v = expect.run(ExpectRequest(_run("NVIDIA A100-SXM4-80GB", 2, 8, "all_reduce", [(1 << 32, 30.0)]), log_text=text))
    assert v.status == "below"
    top = v.causes[0]
    assert top.id == "gdr-partial" and top.evidence[0].startswith("line 3: ") and "via NET/IB/0" in top.evidence[0]


def test_nics_named_by_nccl_ib_hca_set_the_expectation_and_half_of_it_names_acs() -> None:
    # NCCL uses only the HCAs listed: one 200G NIC per node, not the preset's eight
    run = _run("NVIDIA A100-SXM4-80GB", 2, 8, "all_reduce", [(1 << 32, 10.0)], env={"NCCL_IB_HCA": "mlx5_0:1"})
    v = expect.run(ExpectRequest(run))
    assert any(n.what == "NICs per node" and n.value == "1" for n in v.system.inferred)
    assert v.status == "below"
    ids = [c.id for c in v.causes]
    assert "acs-on-nic-path" in ids[:2] and "one-nic" not in ids  # the expectation is already for one NIC
    excluded = expect.run(
        ExpectRequest(
            _run("NVIDIA A100-SXM4-80GB", 2, 8, "all_reduce", [(1 << 32, 10.0)], env={"NCCL_IB_HCA": "^mlx5_4"})
        )
    )
    assert any(n.what == "NICs per node" and n.value == "8" for n in excluded.system.assumed)


def test_an_unnamed_four_gpu_host_is_taken_for_gb200_said_so_and_nvlink_rack_is_not_a_network() -> None:
    run = _run("NVIDIA Graphics Device", 18, 4, "all_reduce", [(1 << 33, 400.0)])
    v = expect.run(ExpectRequest(run))
    assert v.system.topology.name == "gb200-nvl72"
    assert any(n.what == "GPU model" and "GB200" in n.value for n in v.system.assumed)
    assert v.status == "below"
    assert not [c for c in v.causes if c.finding in ("gdr", "nic-count", "acs-iommu", "algorithm-choice")]
    with pytest.raises(ExpectError, match="Graphics Device"):
        expect.run(ExpectRequest(_run("NVIDIA Graphics Device", 1, 8, "all_reduce", [(1 << 30, 100.0)])))


def test_each_instinct_generation_is_judged_on_its_own_fabric() -> None:
    """An MI355X has a faster Infinity Fabric mesh (537.6 GB/s a GPU) than the MI300X/MI325X (448): its run is not
    judged on the older mesh's band."""
    rows = [(8 << 30, 300.0)]
    new = expect.run(ExpectRequest(_run("AMD Instinct MI355X", 1, 8, "all_reduce", rows)))
    old = expect.run(ExpectRequest(_run("AMD Instinct MI300X", 1, 8, "all_reduce", rows)))
    assert (new.system.topology.name, old.system.topology.name) == ("mi355x-8gpu", "mi325x-8gpu")
    assert new.rows[0].expected.upper_bytes_per_s > old.rows[0].expected.upper_bytes_per_s
    # the MI350X (the MI355X's silicon at 2.2 GHz and 1000 W) is judged on its own preset [27 s16 mi350x]
    mi350 = expect.run(ExpectRequest(_run("AMD Instinct MI350X", 1, 8, "all_reduce", rows)))
    assert mi350.system.topology.name == "mi350x-8gpu"


def test_fewer_channels_than_two_per_nic_name_the_nics_missing() -> None:
    text = "\n".join(
        [
            "ip:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa",
            "ip:1:1 [0] NCCL INFO 6 coll channels, 6 p2p channels, 1 p2p channels per peer",
        ]
    )
    v = expect.run(ExpectRequest(_run("NVIDIA A100-SXM4-40GB", 4, 8, "all_reduce", [(1 << 30, 29.6)]), log_text=text))
    assert v.status == "below"
    assert v.causes[0].id == "channels-show-fewer-nics"
    assert "6 channels = 2 x 3 NICs, of the 4 per node" in v.causes[0].evidence[0]


def test_nvls_only_where_nccl_has_it() -> None:
    rows = [(8 << 30, 370.0)]
    new = judge(_run("NVIDIA H100 80GB HBM3", 1, 8, "all_reduce", rows), log_facts("NCCL version 2.21.5+cuda12.4"))
    old = judge(_run("NVIDIA H100 80GB HBM3", 1, 8, "all_reduce", rows), log_facts("NCCL version 2.14.3+cuda11.7"))
    assert "nvls" in new.rows[0].expected.algos and new.status == "below"  # ring's 370 under NVLS's ~480 band
    assert "nvls" not in old.rows[0].expected.algos and old.status == "normal"
    assert any(n.what == "NVLS" and "2.14.3" in n.value for n in old.system.inferred)


def test_the_model_band_per_size_names_its_limit() -> None:
    v = judge(_run("NVIDIA H100 80GB HBM3", 1, 8, "all_gather", [(1024, 0.05), (8 << 30, 360.0)]), [])
    small, large = v.rows
    assert small.expected.latency_bound and small.expected.limit.endswith("latency")
    assert not large.expected.latency_bound and large.expected.limit == "NVLink4 + NVSwitch bandwidth"
    assert large.expected.lower_bytes_per_s < 360e9 < large.expected.upper_bytes_per_s and large.status == "normal"


def test_unknown_gpu_is_refused_with_the_way_out(tmp_path: Path) -> None:
    with pytest.raises(ExpectError, match="no topology known for GPU 'Mystery X1'; give --topology"):
        judge(_run("Mystery X1", 1, 8, "all_reduce", [(1 << 30, 100.0)]), [])
    given = judge(_run("Mystery X1", 1, 8, "all_reduce", [(1 << 30, 100.0)]), [], load_topology("dgx-a100"))
    assert given.system.topology.name == "dgx-a100"
    assert any(n.source == "given (--topology)" for n in given.system.inferred)


def test_cli_refuses_bad_input_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "x.log"
    bad.write_text("hello\n")
    result = CliRunner().invoke(app, ["expect", str(bad)])
    assert result.exit_code == 2 and "error:" in result.output
    topo = CliRunner().invoke(app, ["expect", str(bad), "--topology", "no-such-preset"])
    assert topo.exit_code == 2 and "--topology" in topo.output


def test_every_cause_has_a_source_and_known_fields() -> None:
    table = causes_table()
    assert len({c.id for c in table}) == len(table)
    assert all(c.source.strip() and c.try_.strip() and c.applies_to in ("below", "above") for c in table)


def test_dashboard_run_page_shows_the_verdict_and_the_api_carries_the_band(realdata: Path, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from commlens.serve.app import create_app
    from commlens.serve.config import ServeConfig

    db = f"sqlite:///{tmp_path / 'r.db'}"
    stored = CliRunner().invoke(app, ["ingest", str(realdata / EFA_283), "--db", db])
    assert stored.exit_code == 0, stored.output
    run_id = stored.stdout.split("stored run ")[1].split()[0]
    with TestClient(create_app(ServeConfig(db_url=db)), base_url="http://127.0.0.1:8765") as client:
        doc = client.get(f"/api/runs/{run_id}").json()
        assert doc["expect"]["status"] == "below" and doc["expect"]["system"]["topology"] == "dgx-a100-as-inferred"
        row = doc["expect"]["rows"][-1]
        assert row["size_bytes"] == 1 << 30 and row["lower_busbw_bytes_per_s"] < row["upper_busbw_bytes_per_s"]
        page = client.get(f"/runs/{run_id}").text
        assert 'id="expect-verdict" class="expect-below"' in page
        assert "below expectation by 13% (all_reduce, bandwidth-bound sizes" in page


def test_nics_the_user_states_replace_the_presets_and_say_so() -> None:
    from commlens.expect import given_facts

    run = _run("NVIDIA H100 80GB HBM3", 3, 8, "all_reduce", [(1 << 32, 192.0)], env={"NCCL_ALGO": "Ring"})
    assumed = judge(run, [])
    told = judge(run, given_facts(nics=4, nic_gbps=400))
    assert assumed.status == "below" and any(n.what == "NICs per node" for n in assumed.system.assumed)
    assert assumed.causes[0].id == "fewer-nics-than-assumed"
    assert (
        "peak busBW 192.0 GB/s = 4.00 x one NIC (48.0 GB/s): about 4 NICs fully used, of the 8 assumed"
        in assumed.causes[0].evidence[0]
    )
    assert told.status == "normal"
    assert [(n.value, n.source) for n in told.system.inferred if n.what == "NICs per node"] == [
        ("4", "given: --nics 4")
    ]
    with pytest.raises(ExpectError, match="--nic-gbps 0: expected"):
        given_facts(nic_gbps=0)


def test_a_log_without_nic_lines_is_judged_on_the_fewest_documented_nics_that_reach_its_busbw() -> None:
    """A100 nodes come as 4 x 100G EFA (p4d), 4 x HDR or 8 x HDR: a log that lists none is judged on the fewest that
    can carry its busBW, and says what the verdict would be on the reference 8 x HDR."""
    four = judge(_run("NVIDIA A100-SXM4-40GB", 3, 8, "all_reduce", [(128 << 20, 96.0)]), [])
    assert four.status == "normal" and four.network is not None
    assert (four.network.judged_on, four.network.reference, four.network.reference_status) == (
        "4 x 200 Gb/s",
        "8 x 200 Gb/s",
        "below",
    )
    assert "judged on 4 x 200 Gb/s NICs per node" in four.headline() and "on 8 x 200 Gb/s: below by" in four.headline()
    assert json.loads(json.dumps(four.as_dict()))["network"]["judged_on"] == "4 x 200 Gb/s"
    assert any(
        n.what == "NICs per node, range" and n.value.startswith("4 x 100 Gb/s, 4 x 200 Gb/s or 8 x 200 Gb/s")
        for n in four.system.assumed
    )
    p4d = judge(_run("NVIDIA A100-SXM4-40GB", 2, 8, "all_reduce", [(1 << 30, 48.0)]), [])
    assert p4d.status == "normal" and p4d.network is not None and p4d.network.judged_on == "4 x 100 Gb/s"
    # half of what even the fewest NICs carry: below on every build, judged on the fewest that reach it
    half = judge(_run("NVIDIA A100-SXM4-40GB", 2, 8, "all_reduce", [(1 << 30, 24.0)]), [])
    assert half.status == "below" and half.network is not None and half.network.judged_on == "4 x 100 Gb/s"
    listed = log_facts(
        "h0:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB "
        "[3]mlx5_3:1/IB [4]mlx5_4:1/IB [5]mlx5_5:1/IB [6]mlx5_6:1/IB [7]mlx5_7:1/IB ; OOB eth0"
    )
    eight = judge(_run("NVIDIA A100-SXM4-40GB", 3, 8, "all_reduce", [(128 << 20, 96.0)]), listed)
    assert eight.status == "below" and eight.network is None and eight.system.nic_options == ()  # the log says 8
    # one 100G adapter per V100 node (AWS p3dn's build) is a documented build too: 12 GB/s is its rate
    one = judge(_run("Tesla V100-SXM2-16GB", 4, 8, "all_reduce", [(512 << 20, 12.0)]), [])
    assert one.status == "normal" and one.network is not None and one.network.judged_on == "1 x 100 Gb/s"
    # on H100 no build with less network per node is documented: no range, judged on the reference
    h100 = judge(_run("NVIDIA H100 80GB HBM3", 2, 8, "all_reduce", [(1 << 30, 100.0)]), [])
    assert h100.status == "below" and h100.network is None and h100.system.nic_options == ()


def test_nvlink_at_pcie_rates_reads_the_gpus_own_pcie_generation() -> None:
    """20 GB/s on one node: 0.42 of an H100's Gen5 x16 link (48 GB/s as NCCL credits it), 0.83 of an A100's Gen4."""
    h100 = judge(_run("NVIDIA H100 80GB HBM3", 1, 8, "all_reduce", [(1 << 30, 20.0)]), [])
    a100 = judge(_run("NVIDIA A100-SXM4-80GB", 1, 8, "all_reduce", [(1 << 30, 20.0)]), [])
    assert h100.causes[0].id == a100.causes[0].id == "nvlink-at-pcie-rates"
    assert "= 0.42 x PCIe Gen5 x16 (48 GB/s)" in h100.causes[0].evidence[0]
    assert "= 0.83 x PCIe Gen4 x16 (24 GB/s)" in a100.causes[0].evidence[0]


def test_a_curve_still_rising_at_its_largest_size_is_said_so() -> None:
    """busBW 20% up over the last doubling: the run has not shown its plateau; a flat end says nothing."""
    rows = [(64 << 20, 300.0), (128 << 20, 330.0), (256 << 20, 400.0)]
    rising = judge(_run("NVIDIA H100 80GB HBM3", 1, 8, "all_reduce", rows), [])
    assert rising.still_rising is not None and abs(rising.still_rising - (400 / 330 - 1)) < 1e-9
    assert "busBW still rising at the largest size (+21%)" in rising.headline()
    assert rising.as_dict()["still_rising"] == round(400 / 330 - 1, 4)
    flat = judge(_run("NVIDIA H100 80GB HBM3", 1, 8, "all_reduce", [(1 << 32, 470.0), (1 << 33, 475.0)]), [])
    assert flat.still_rising is None and "still rising" not in flat.headline()


def test_causes_known_by_figures_are_ranked_by_how_well_their_plateau_explains_the_measured_one() -> None:
    """Without INFO lines: 19 GB/s on 2 x 8 H100 (0.4 of one 400G NIC's rate) is what NCCL's socket
    transport gives, not half the NICs (GDR off, ACS) nor a whole number of NICs."""
    socket = judge(_run("NVIDIA H100 80GB HBM3", 2, 8, "all_reduce", [(1 << 32, 19.0)]), [])
    assert [c.id for c in socket.causes] == ["socket-suspected"]
    assert socket.causes[0].fit == 1.0
    assert any("predicted peak_over_one_nic 0.02 to 0.75" in e for e in socket.causes[0].evidence)
    # 0.43 of what 8 x 400G carry (3.4 NICs: no whole number): ACS (0.3-0.6) and GDR off (0.3-0.7) both explain it;
    # the narrower prediction first
    half = judge(_run("NVIDIA H100 80GB HBM3", 2, 8, "all_reduce", [(1 << 32, 165.0)]), [])
    assert [c.id for c in half.causes[:2]] == ["acs-on-nic-path", "gdr-unconfirmed"]
    assert half.causes[0].score > half.causes[1].score > 0
    # a log line that shows the fault ranks before every figure
    shown = judge(
        _run("NVIDIA H100 80GB HBM3", 2, 8, "all_reduce", [(1 << 32, 165.0)]),
        log_facts("h0:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0"),
    )
    assert shown.causes[0].id == "gdr-off" and shown.causes[0].score == 0.0
    # NCCL_ALGO alone is no cause (the band is that algorithm's); NCCL_PROTO is
    ring = judge(_run("NVIDIA H100 80GB HBM3", 2, 8, "all_reduce", [(1 << 32, 165.0)], env={"NCCL_ALGO": "Ring"}), [])
    assert "proto-or-algo-forced" not in [c.id for c in ring.causes]
    proto = judge(_run("NVIDIA H100 80GB HBM3", 2, 8, "all_reduce", [(1 << 32, 165.0)], env={"NCCL_PROTO": "LL"}), [])
    assert "proto-or-algo-forced" in [c.id for c in proto.causes]


def test_monitor_expects_what_nccl_chooses_among_as_expect_does() -> None:
    from commlens.model.backends import NCCL_ALGORITHMS
    from commlens.monitor.expect import Expectations

    topo = load_topology("dgx-h100")
    monitor = Expectations(topo, "nccl", 8)
    verdict = judge(_run("NVIDIA H100 80GB HBM3", 1, 8, "all_reduce", [(64 << 10, 1.0), (8 << 30, 480.0)]), [])
    for row in verdict.rows:
        seen = monitor.expected("all_reduce", row.size_bytes, tuple(range(8)))
        assert seen is not None and seen.algo in NCCL_ALGORITHMS["all_reduce"]
        assert seen.algo == row.expected.algos[0]
        assert seen.busbw_bytes_per_s == pytest.approx(row.expected.model_bytes_per_s)


# -- the light path: compiled tables, plain topologies per run, an ingest without pydantic or yaml --------

GiB = 1 << 30


def test_the_expect_stage_takes_one_request_and_judge_run_is_its_shorthand() -> None:
    run = _run("NVIDIA A100-SXM4-80GB", 2, 8, "all_reduce", [(1 << 32, 30.0)])
    text = "node1:7:7 [0] NCCL INFO Using network Socket\n"
    given = tuple(expect.given_facts(nics=4))
    request = ExpectRequest(run, text, load_topology("dgx-a100"), given)
    assert expect.run(request) == judge_run(run, log_text=text, topology=request.topology, given=list(given))
    for bad, message in (
        ({"run": "run-1"}, "^run: must be a Run, got str$"),
        ({"log_text": b"NCCL INFO"}, "^log_text: must be text or None, got bytes$"),
        ({"topology": "dgx-a100"}, "^topology: must be a Topology or None, got str$"),
        ({"given": list(given)}, "^given: must be a tuple of Fact"),
    ):
        with pytest.raises(ExpectError, match=message):
            ExpectRequest(**{"run": run, **bad})  # type: ignore[arg-type]


def test_the_shipped_compiled_tables_are_those_of_the_sources() -> None:
    doc = json.loads(tables_mod.COMPILED.read_text())
    hint = 'stale: python -c "from commlens.expect.tables import write_compiled; write_compiled()"'
    assert doc["digest"] == tables_mod.source_digest(), hint
    assert doc["tables"] == json.loads(json.dumps(tables_mod.build_tables())), hint


def test_stale_compiled_tables_are_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = json.loads(tables_mod.COMPILED.read_text())
    stale["digest"] = "0" * 64
    stale["tables"]["bands"]["choice_margin"] = 9.0  # what an edited YAML would no longer say
    path = tmp_path / "compiled.json"
    path.write_text(json.dumps(stale))
    monkeypatch.setattr(tables_mod, "COMPILED", path)
    tables_mod.tables.cache_clear()
    try:
        assert tables_mod.tables()["bands"]["choice_margin"] == tables_mod.build_tables()["bands"]["choice_margin"]
    finally:
        tables_mod.tables.cache_clear()


@pytest.mark.parametrize("name", list_presets())
def test_a_plain_preset_models_as_the_spec_does(name: str) -> None:
    spec = load_topology(name)
    plain = plain_topology(tables_mod.preset_data(name), source=name)
    nodes = [1, 2] if spec.scale_out is not None else [1]
    for n in nodes:
        n *= spec.domain_nodes
        assert build_layout(plain, n) == build_layout(spec, n)
        a = predict(plain, "all_reduce", GiB, algo="ring", layout=build_layout(plain, n))
        b = predict(spec, "all_reduce", GiB, algo="ring", layout=build_layout(spec, n))
        assert a.busbw_bytes_per_s == b.busbw_bytes_per_s


def test_a_derived_plain_topology_that_breaks_the_levels_is_refused() -> None:
    from commlens.topology import TopologyError

    data = tables_mod.preset_data("dgx-h100")
    data["scale_out"]["nics_per_node"] = 3
    with pytest.raises(TopologyError, match="nics_per_node: 3 NICs do not divide"):
        plain_topology(data)


@pytest.mark.parametrize(
    ("level", "key", "value", "said"),
    [
        ((), "accelerators_per_node", "8", "accelerators_per_node: expected a whole number, got '8'"),
        (("scale_up",), "latency_s", None, "scale_up.latency_s: missing"),
        (("scale_out",), "nic_speed", 1, "scale_out.nic_speed: unknown field"),
        (("accelerator",), "reduction_overlaps_transfer", 1, "accelerator.reduction_overlaps_transfer: expected true"),
        (("scale_up",), "efficiency", True, "scale_up.efficiency: expected a number, got True"),
        (("scale_up",), "cache_bytes", 2.5, "scale_up.cache_bytes: expected a whole number, got 2.5"),
        (("scale_out", "tiers", 0), "nodes", 4.0, "scale_out.tiers[0].nodes: expected a whole number, got 4.0"),
        (("scale_out",), "tiers", "leaf", "scale_out.tiers: expected a list, got 'leaf'"),
        (("scale_out", "tiers"), 0, [], "scale_out.tiers[0]: expected a mapping, got []"),
        ((), "calibration", "fitted", "calibration: expected a mapping, got 'fitted'"),
        ((), "scale_up", None, "scale_up: missing"),
    ],
)
def test_plain_data_with_a_bad_field_is_refused_naming_it(
    level: tuple[str | int, ...], key: str | int, value: object, said: str
) -> None:
    from commlens.topology import TopologyError

    data = tables_mod.preset_data("dgx-h100")
    at = data
    for name in level:
        at = at[name]
    if value is None:
        del at[key]
    else:
        at[key] = value
    with pytest.raises(TopologyError, match=re.escape(said)):
        plain_topology(data, source="derived")


_LOG = "\n".join(
    [
        "NCCL version 2.21.5+cuda12.4",
        "h0:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0",
        "h0:1:1 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0",
    ]
)


@pytest.mark.parametrize(
    ("gpu", "hosts", "per_host", "op", "busbw", "log"),
    [
        ("NVIDIA H100 80GB HBM3", 2, 8, "all_reduce", 120.0, _LOG),  # NICs and GDR from the log
        ("NVIDIA H100 80GB HBM3", 1, 8, "all_reduce", 470.0, ""),  # NVLS
        ("NVIDIA A100-SXM4-80GB", 2, 8, "all_gather", 40.0, _LOG),  # the log's NICs (without, a band spans 4-8)
        ("NVIDIA H200", 2, 8, "all_gather", 40.0, ""),  # NICs assumed
        ("NVIDIA Graphics Device", 18, 4, "all_reduce", 800.0, ""),  # GB200 rack, assumed
        ("NVIDIA GeForce RTX 5090", 1, 8, "all_reduce", 28.0, ""),  # PCIe link put in the preset's place
        ("Tesla V100-SXM2-32GB", 2, 8, "broadcast", 20.0, ""),  # the GPU table's network
    ],
)
def test_a_derived_topology_judges_as_its_pydantic_twin(
    gpu: str, hosts: int, per_host: int, op: str, busbw: float, log: str
) -> None:
    rows = [(1 << k, busbw * min(1.0, (1 << k) / 2**28)) for k in range(12, 34, 3)]
    run = _run(gpu, hosts, per_host, op, rows)
    facts = log_facts(log)
    light = judge(run, facts)
    twin = topology_from_dict(dataclasses.asdict(light.system.topology))  # the spec checks every field
    heavy = judge(run, facts, twin)
    assert [r.as_dict() for r in light.rows] == [r.as_dict() for r in heavy.rows]
    assert [r.as_dict() for r in light.ranges] == [r.as_dict() for r in heavy.ranges]
    assert [c.as_dict() for c in light.causes] == [c.as_dict() for c in heavy.causes]
    assert light.headline() == heavy.headline()


def test_ingest_judges_without_importing_the_topology_spec_or_yaml(realdata: Path, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from commlens.cli.app import main\n"
        "sys.argv = ['commlens', 'ingest', sys.argv[1], '--db', sys.argv[2]]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print('loaded:', sorted(m for m in ('yaml', 'commlens.topology.spec') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(realdata / EFA_299), f"sqlite:///{tmp_path}/s.db"],
        capture_output=True,
        text=True,
        env=os.environ,
        check=True,
    )
    assert "# expect: normal" in done.stdout  # judged: the verdict is printed
    assert "loaded: []" in done.stdout, done.stdout
