"""The CLI's tables (all but nccl-tests' own layout) are Rich tables printed as plain text off a terminal: a
header, columns two spaces apart (numbers right-aligned), no wrapping, no colour, no trailing spaces.

Each command's table is checked here with its exact header and values; ``commlens runs`` has its golden test in
``test_db_cli.py`` (byte-identical to the table it printed before it was a Rich table).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from commlens.cli import diagnose_cmd, project_cmd, topology_cmd  # noqa: F401  (registers the commands)
from commlens.cli.app import app
from commlens.results.text_tables import new_table, render_table, right

DATA = Path(__file__).parent / "data"
CLI = [sys.executable, "-m", "commlens"]


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def test_a_table_off_a_terminal_is_plain_text_never_wrapped() -> None:
    long = "x" * 300
    table = new_table("name", right("n"), "note", rows=[("a", "1", "[bold]not markup[/]"), ("bbb", "22", long)])
    assert render_table(table) == (
        f"name   n  note\na      1  [bold]not markup[/]\nbbb   22  {long}\n"  # the last column: no padding after it
    )
    assert render_table(table, indent=2).splitlines()[0] == "  name   n  note"
    styled = render_table(table, terminal=True)
    assert "\x1b[1m" in styled  # a bold header on a terminal


def test_topology_list() -> None:
    assert _cli("topology", "list") == (
        "name                   acc/node  domain  up GB/s  NICs  NIC GB/s  max nodes  description\n"
        "b200                          8       8      900     8      50.0       8192  DGX B200 (approximate): 8 "
        "x B200, NVLink5 + NVSwitch (NVLS), 8 x 400 Gb/s, rail-optimized fat tree\n"
        "cisco-h100-roce               8       8      450     8      50.0         16  Cisco hpf (MLPerf v5.1): 8 x "
        "H100 SXM on NVLink4 + NVSwitch, 8 x 400 Gb/s RoCE (ConnectX-7) on a Silicon One G200 Ethernet fabric, one "
        "switch tier assumed (approximate)\n"
        "deepseek-h800                 8       8      200     8      50.0        256  DeepSeek-V3 training "
        "cluster: 2048 H800, 8 per node on NVLink/NVSwitch (400 GB/s), InfiniBand 50 GB/s per GPU (approximate)\n"
        "dgx-a100                      8       8      300     8      25.0       4480  DGX A100: 8 x A100 SXM "
        "80GB, NVLink3 + NVSwitch (no in-switch reduction), 8 x 200 Gb/s HDR, rail-optimized\n"
        "dgx-b300                      8       8      900     8     100.0       8192  DGX B300 (approximate): 8 "
        "x B300, NVLink5 + NVSwitch (NVLS), 8 x 800 Gb/s ConnectX-8, rail-optimized fat tree\n"
        "dgx-h100                      8       8      450     8      50.0       8192  DGX H100: 8 x H100 SXM, "
        "NVLink4 + NVSwitch (NVLS), 8 x 400 Gb/s NDR, rail-optimized fat tree\n"
        "dgx-h200                      8       8      450     8      50.0       8192  DGX H200: 8 x H200 SXM, "
        "NVLink4 + NVSwitch (NVLS), 8 x 400 Gb/s NDR, rail-optimized fat tree\n"
        "dgx2-v100                    16      16      150     8      12.5        648  DGX-2: 16 x V100 SXM3 "
        "32GB, NVLink2 + NVSwitch, 8 x 100 Gb/s EDR (approximate)\n"
        "emulated-cluster             64      64        4     1       0.1        200  hosts of an emulated "
        "cluster on one 2-core machine: gloo over veth within a host, 1 Gb/s shaped links between hosts "
        "(approximate)\n"
        "gb200-nvl72                   4      72      900     4      50.0       2304  GB200 NVL72 (approximate): "
        "racks of 72 GPUs in one NVLink5 domain (NVLS), 4 x 400 Gb/s per 4-GPU tray\n"
        "gb300-nvl72                   4      72      900     4     100.0       2304  GB300 NVL72 (approximate): "
        "racks of 72 Blackwell Ultra GPUs in one NVLink5 domain (NVLS), 4 x 800 Gb/s per 4-GPU tray\n"
        "grand-teton-h100-96gb         8       8      450     8      50.0       3072  torchtitan's benchmark "
        "hosts: Grand Teton, 8 x H100 96GB HBM2e (500 W) on NVLink, 400 Gb/s RDMA per GPU (approximate)\n"
        "h100-rail-2tier               8       8      450     8      50.0       2048  DGX H100 nodes, 8 x 400 "
        "Gb/s NDR, two-tier rail-optimized non-blocking fat tree of 64-port switches, up to 16,384 GPUs\n"
        "ibm-a100-400g                 8       8      300     4      12.5         16  IBM/PyTorch FSDP blog A100 "
        "cluster: 8 x A100 SXM 80GB on NVSwitch per node, 400 Gb/s per node (4 x 100 Gb/s EFA assumed), "
        "GPUDirect RDMA (approximate)\n"
        "ibm-h100-800g                 8       8      450     2      50.0         12  IBM/PyTorch FSDP blog H100 "
        "cluster: 8 x H100 SXM 80GB on NVSwitch per node, 800 Gb/s per node (2 x 400 Gb/s assumed) (approximate)\n"
        "jean-zay-a100                 8       8      300     4      12.5         48  Jean Zay gpu_p5 (BLOOM-176B): "
        "8 x A100 SXM 80GB on NVLink/NVSwitch per node, 4 x 100 Gb/s Omni-Path per node (approximate)\n"
        "local-cpu                    64      64        4     0       0.0          1  ranks as processes on one "
        "host, gloo over loopback TCP; calibrated on a 4-rank run of this machine type (approximate)\n"
        "meta-h100-roce                8       8      450     8      50.0       3072  Llama 3 405B cluster: 8 x "
        "H100 SXM on NVLink per server, 400 Gb/s RoCE per GPU, 3,072-GPU pods, 1:7 between pods\n"
        "mi325x-8gpu                   8       8      448     8      50.0         32  8 x AMD MI325X on an "
        "Infinity Fabric mesh (448 GB/s per GPU), 8 x 400 Gb/s per node assumed (approximate)\n"
        "mi350x-8gpu                   8       8      538     8      50.0         32  8 x AMD MI350X on an "
        "Infinity Fabric mesh (537.6 GB/s per GPU), 8 x 400 Gb/s per node assumed (approximate)\n"
        "mi355x-8gpu                   8       8      538     8      50.0         32  8 x AMD MI355X on an "
        "Infinity Fabric mesh (537.6 GB/s per GPU), 8 x 400 Gb/s per node assumed (approximate)\n"
    )


def test_diagnose_stragglers_ranks_table() -> None:
    traces = sorted(str(p) for p in (DATA / "stragglers_late_rank1").glob("trace_rank*.json"))
    lines = _cli("diagnose", "stragglers", *traces).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("collective"))
    assert lines[start : start + 8] == [
        "collective       rank   n  offset(us)  late p50(us)  late p90(us)  last%  own p50(us)  verdict",
        "gloo:all_reduce     0  10         0.0         416.3        7405.5      0        749.0  ok",
        "gloo:all_reduce     1  10         0.0       27832.6       54760.4    100       1138.0  late_arrival",
        "gloo:all_reduce     2  10         0.0           0.0         249.5      0        965.3  ok",
        "gloo:broadcast      0  10         0.0          37.1         229.9     10            -  ok",
        "gloo:broadcast      1  10         0.0         684.6        3985.2     60            -  ok",
        "gloo:broadcast      2  10         0.0         271.8         759.4     30            -  ok",
        "stragglers (shared_clock): rank 1 (late_arrival, gloo:all_reduce)",
    ]


def test_diagnose_hang_culprits_table_keeps_each_frame_on_its_own_line() -> None:
    torch = "/work/main/.venv/lib/python3.11/site-packages/torch/distributed"  # as the dumps recorded them
    pad = " " * 38
    assert _cli("diagnose", "hang", str(DATA / "hang_op_mismatch")).splitlines()[3:9] == [
        "rank  issued     sizes     dtypes     where (innermost first)",
        f'   1  broadcast  [[1024]]  ["Float"]  {torch}/distributed_c10d.py:3145 in broadcast',
        f"{pad}{torch}/c10d_logger.py:83 in wrapper",
        f"{pad}/work/main/tests/scenarios/fr_hang.py:64 in main",
        f"{pad}/work/main/tests/scenarios/fr_hang.py:80 in <module>",
        "culprit rank(s): 1",
    ]


def test_links_report_matrices() -> None:
    from test_diagnose_links import _records  # its synthetic probe records

    from commlens.diagnose.links_analysis import diagnose_links
    from commlens.diagnose.links_report import format_report

    report = format_report(diagnose_links(_records({(0, 3): 30e6, (1, 3): 30e6, (2, 3): 30e6, (3, 4): 30e6}, 5), 5))
    assert report.splitlines()[:14] == [
        "# point-to-point bandwidth (GB/s, row host sends to column host, 1000000 B messages, 3 passes)",
        "host  0      1      2      3      4",
        "   0  -  0.100  0.100  0.030  0.100",
        "   1  -      -  0.100  0.030  0.100",
        "   2  -      -      -  0.030  0.100",
        "   3  -      -      -      -  0.030",
        "   4  -      -      -      -      -",
        "# latency (µs, median half round trip of 8 B)",
        "host      0      1      2      3      4",
        "   0      -  100.0  100.0  100.0  100.0",
        "   1  100.0      -  100.0  100.0  100.0",
        "   2  100.0  100.0      -  100.0  100.0",
        "   3  100.0  100.0  100.0      -  100.0",
        "   4  100.0  100.0  100.0  100.0      -",
    ]


def test_project_tables() -> None:
    out = _cli("project", "megatron-gpt-7.5b", "-t", "dgx-a100", "-n", "128", "--tp", "4").splitlines()
    start = out.index("  breakdown (s, share of step):")
    assert out[start + 1] == "    part          time s  share"
    assert [line.split()[0] for line in out[start + 2 : start + 8]] == [
        "compute",
        "memory_bound",
        "tp_comm",
        "slowest_gpu",
        "dp_comm",
        "optimizer",
    ]
    sweep = _cli(
        "project", "sweep", "megatron-gpt-7.5b", "-t", "dgx-a100", "-n", "128", "--tp", "4", "--vary",
        "layout.pp=1,64", "--workers", "1",
    ).splitlines()  # fmt: skip
    assert sweep[0].split() == ["layout.pp", "step", "s", "tokens/s", "MFU", "%", "mem", "GB", "layout"]
    assert sweep[1].startswith("        1  ") and sweep[1].endswith("  tp4 cp1 pp1x1 dp32 ep1 z1")
    assert sweep[2].startswith("       64  ") and sweep[2].endswith(
        "  infeasible: TP x CP x PP = 4 x 1 x 64 = 256 does not divide 128 GPUs"
    )
    validate = (
        CliRunner()
        .invoke(app, ["project", "validate", "--table", "megatron-sc21"], catch_exceptions=False)
        .stdout.splitlines()
    )
    assert validate[1] == "megatron-sc21"
    assert validate[2] == (
        "workload             topology  GPUs  layout                   figure   published  predicted  error  in band"
    )
    assert validate[3].startswith("megatron-gpt-1.7b    dgx-a100    32  tp1 cp1 pp1x1 ep1 dp32   TFLOP/s        137  ")
    assert validate[3].endswith(("  yes", "  no"))  # the row against its family's band fitted without it
    assert validate[13].startswith("  megatron-sc21: mean absolute error ")


def test_project_calibrate_tables() -> None:
    path = DATA / "calibration" / "h200-calibration.json"
    proc = subprocess.run([*CLI, "project", "calibrate", "--from", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = lines.index("streaming kernels, fraction of HBM bandwidth (median over sizes; min-max):")
    assert lines[start + 1 : start + 3] == [
        "  kernel      fraction      min-max",
        "  copy           0.878  0.797-0.890",
    ]
    start = next(i for i, line in enumerate(lines) if line.startswith("GEMM curve"))
    assert lines[start + 1 : start + 3] == [
        "  constants  gemm_eff  k_over  MAPE  transformer  attention  square  small  fp16  bf16",
        "  current      0.7140    64.0  7.6%         7.0%      12.8%    5.8%  44.7%  7.4%  7.6%",
    ]
    start = lines.index("worst fitted shapes after the fit (error = model / measured - 1):")
    assert lines[start + 1 : start + 3] == [
        "   error  dtype  layout  shape              case                         measured TFLOP/s  model TFLOP/s",
        "  -70.7%  bf16   nt      2048x2048x256      h2048 tp8 t2048 proj fwd                123.8          422.2",
    ]


# -- model, compare: tables that were hand-aligned before ------------------------------------------


def test_model_predict_breakdown_and_algo_all_tables() -> None:
    from commlens.cli import model_cmd  # noqa: F401  (registers the commands)

    out = _cli("model", "predict", "-t", "dgx-h100", "--size", "1M", "--breakdown")
    assert out.splitlines()[2:] == [
        "stage  level     term          amount  time (us)  critical",
        "    0  software  launch         1 msg       6.60  *",
        "    1  scale_up  latency        6 msg       3.60  *",
        "    1  scale_up  bandwidth  1835008 B       4.95  *",
        "    1  compute   reduction   917504 B       0.82",
    ]
    out = _cli("model", "predict", "-t", "dgx-a100", "--op", "all_reduce", "--size", "256M", "--algo", "all")
    assert out.splitlines()[1:5] == [
        "algo                time (us)  algbw GB/s  busbw GB/s  bottleneck",
        "ring                   1972.3      136.10      238.17  scale_up bandwidth",
        "recursive_doubling     3363.8       79.80      139.65  scale_up bandwidth",
        "rabenseifner           1967.5      136.43      238.76  scale_up bandwidth  <- fastest",
    ]
    assert out.splitlines()[-1] == (
        "nvls                        -           -           -  cannot run: nvls needs in-switch reduction in the "
        "scale-up domain; dgx-a100 has none"
    )


def test_model_check_residuals_and_summary_tables() -> None:
    from commlens.cli import model_cmd  # noqa: F401  (registers the commands)

    lines = _cli("model", "check", str(DATA / "model" / "gloo-4ranks.json"), "--stat", "min").splitlines()
    assert lines[1:3] == [
        "op              size (B)  place  model               meas (us)  pred (us)  meas GB/s  pred GB/s    error",
        "all_reduce          1024     in  all_reduce/ring        1674.8     2196.5      0.001      0.001   +31.1%",
    ]
    assert lines[-7:] == [
        "# op              rows   MAPE     max    bias",
        "# all_reduce        15  76.8%  151.4%  +76.8%",
        "# all_gather        30  40.8%  106.4%  +29.7%",
        "# reduce_scatter    30  42.4%  109.9%  +39.2%",
        "# all_to_all        15  44.4%   96.6%  +43.4%",
        "# broadcast         15  48.2%   92.8%  +31.6%",
        "# all: 105 rows, MAPE 48.0%, max 151.4%, bias +41.4%",
    ]


def test_model_fit_constants_table() -> None:
    from commlens.cli import model_cmd  # noqa: F401  (registers the commands)

    lines = _cli("model", "fit", str(DATA / "model" / "gloo-4ranks.json"), "--stat", "min").splitlines()
    assert lines[1] == "constant                             template      fitted  ± 1 sigma  note"
    assert lines[6] == (
        "accelerator.reduction_bytes_per_s      2 GB/s        held             (the rows cannot separate it from "
        "the other constants (template value kept))"
    )
    assert lines[8:10] == [
        "scale_out.latency_s                         -        held             (no row spans more than one scale-up "
        "domain)",
        "scale_out.rate_bytes_per_s                  -        held             (no row spans more than one scale-up "
        "domain)",
    ]


def test_compare_table_header_is_a_comment_and_rows_are_indented(tmp_path, monkeypatch) -> None:
    from commlens.cli import regress_cmd  # noqa: F401  (registers the commands)

    monkeypatch.setenv("COMMLENS_DB", str(tmp_path / "none.db"))
    regress = DATA / "regress"
    base, cand = str(regress / "base-all_reduce.log"), str(regress / "candidate-all_reduce-10pct-slower.log")
    lines = _cli("compare", base, cand, "--no-noise-floors").splitlines()
    reason = "run-to-run variation not measured (base and candidate: fewer than 3 rounds or runs, no noise floor known)"
    assert lines[2:5] == [
        "# op          size  dtype    redop  place      n  base us  cand us  base GB/s  cand GB/s  spread  ratio  "
        "95% CI  p adj  verdict  reason",
        f"  all_reduce    1M  float32  sum    out    1x/1x    27.76    30.54      66.10      60.09       -  1.100  "
        f"-           -  unknown  {reason}",
        f"  all_reduce    2M  float32  sum    out    1x/1x    40.66    44.73      90.26      82.05       -  1.100  "
        f"-           -  unknown  {reason}",
    ]
    markdown = _cli("compare", base, cand, "--no-noise-floors", "--format", "markdown").splitlines()
    assert markdown[6:8] == [
        "| op | size | dtype | redop | place | n | base us | cand us | base GB/s | cand GB/s | spread | ratio | 95% CI "
        "| p adj | verdict | reason |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|",
    ]


def test_set_takes_one_value_and_says_how_to_give_several() -> None:
    """``--set`` shares ``--vary``'s parser, where a comma makes a list: a projection takes one value, so two are an
    error, not the first one kept (``layout.cuda_graph_scope=attn,moe_router`` kept only attn)."""
    base = ["project", "llama3-70b", "-t", "dgx-h100", "--gpus", "64", "--tp", "8", "--pp", "2"]
    result = CliRunner().invoke(app, [*base, "--set", "layout.tp=2,4"])
    assert result.exit_code == 2
    assert "--set layout.tp takes one value, got 2 (2, 4)" in result.output

    def step(scope: str) -> float:
        out = CliRunner().invoke(
            app, [*base, "--set", "layout.cuda_graphs=true", "--set", f"layout.cuda_graph_scope={scope}", "--json"]
        )
        assert out.exit_code == 0, out.output
        return float(json.loads(out.output)["step_time_s"])

    assert step("attn-mlp") < step("attn")  # both scopes read: the MLP's launches are replayed too
