"""Held-out table added in session 16 [27 s16 mlperf]: MLPerf Training v3.0-v5.1 closed-division GPT-3 175B,
Llama 3.1 405B and Llama 3.1 8B pre-training step times, read from the result logs of NVIDIA's and partners' NeMo submissions, with
the settings of each submission's own config files. Nothing in the model was fitted to them; these tests check that
the table loads as the logs give it, that the rows carry their configs' settings and that every row projects."""

from __future__ import annotations

import pytest

from commlens.project.validate import load_set, validate_set

TABLE = "mlperf-training-llm"


def test_the_table_holds_every_submission_once():
    table = load_set(TABLE)
    assert table.metric == "step_time_s" and len(table.rows) == 74
    by: dict[tuple[str, str, str], int] = {}
    nvfp4: dict[tuple[str, str], int] = {}
    b300: dict[object, int] = {}
    for r in table.rows:
        if r.topology == "dgx-b300":  # [27 s25 b300] v5.1's B300 HGX results
            b300[r.layout.get("fp8_recipe")] = b300.get(r.layout.get("fp8_recipe"), 0) + 1
            assert "[27 s25 b300]" in r.note and "result_*.txt" in r.note
            continue
        if r.layout.get("fp8_recipe") == "nvfp4":  # [27 s25 nvfp4] v5.1's NVFP4 results
            nvfp4[(r.workload, r.topology)] = nvfp4.get((r.workload, r.topology), 0) + 1
            assert "[27 s25 nvfp4]" in r.note and r.layout["nvfp4_rht"] is False and "result_*.txt" in r.note
            continue
        key = (r.workload, r.layout["framework"], r.topology)
        by[key] = by.get(key, 0) + 1
        assert (
            ("[27 s16 mlperf]" in r.note or "[27 s16 mlperfadd]" in r.note)
            and "result_*.txt" in r.note
            and "config_" in r.note
        )
    assert nvfp4 == {
        ("llama3-405b", "gb200-nvl72"): 3,  # NVIDIA hsg 2560 / 5120, tyche 512
        ("llama3-405b", "gb300-nvl72"): 1,  # NVIDIA theia 512
        ("llama3-8b", "gb200-nvl72"): 1,  # NVIDIA tyche 8
        ("llama3-8b", "gb300-nvl72"): 1,  # NVIDIA theia 8
        ("llama3-8b", "b200"): 9,  # Dell, Supermicro 2, Lenovo 2, Oracle, Nebius n1 / n2 / n4
    }
    assert b300 == {"current": 2, "nvfp4": 2}  # Dell and Supermicro FP8, Lenovo and Nebius NVFP4
    assert by == {
        ("gpt3-175b", "nemo-24.03", "dgx-h100"): 13,  # v3.0 (5) and v3.1 (8): ngc23.04 / ngc23.09
        ("gpt3-175b", "nemo-24.07", "dgx-h100"): 4,  # v4.0 ngc24.04: NVIDIA 3, Supermicro 1 (three names, one log set)
        ("gpt3-175b", "nemo-24.09", "dgx-h100"): 2,  # v4.1 ngc24.09
        ("gpt3-175b", "nemo-24.09", "meta-h100-roce"): 2,  # v4.1 Oracle OCI H100 on RoCE [27 s16 mlperfadd]
        ("gpt3-175b", "nemo-24.09", "b200"): 1,  # v4.1 B200 preview
        ("llama3-405b", "nemo-25.04", "gb200-nvl72"): 7,  # v5.0 ngc25.04: NVIDIA 2, IBM / CoreWeave 5
        ("llama3-405b", "nemo-25.02", "dgx-h100"): 5,  # v5.0 ngc25.01 on Eos
        ("llama3-405b", "nemo-25.02", "dgx-h200"): 2,  # v5.0 Nebius (v5.1 repeats the same logs)
        ("llama3-405b", "megatron-core-25.09", "b200"): 2,  # v5.1 University of Florida 32 / 56 DGX B200
        ("llama3-8b", "nemo-25.07", "cisco-h100-roce"): 2,  # v5.1 Cisco (NeMo v2.4.0 image; RoCE: [27 s16 cisco])
        ("llama3-8b", "megatron-core-25.09", "b200"): 10,  # v5.1 Dell 2 x 8, Verda 8 x 8, Oracle 8 x 8, UF 1-32 x 8
        ("llama3-8b", "megatron-core-25.09", "dgx-h200"): 1,  # v5.1 HPE XD670 8 x 8 (pytorch:25.08 image)
        ("llama3-8b", "megatron-core-25.09", "gb300-nvl72"): 2,  # v5.1 NVIDIA Theia
        ("llama3-8b", "megatron-core-25.09", "gb200-nvl72"): 2,  # v5.1 NVIDIA Tyche
    }
    # the logged figures: v3.0 NVIDIA 64 nodes (train_step_timing median), v4.0 from block durations, v5.0 train_step_time
    assert (table.rows[0].gpus, table.rows[0].published) == (512, 12.0777)
    assert (table.rows[15].gpus, table.rows[15].published, table.rows[15].overrides["global_batch"]) == (
        512,
        10.9797,
        2304,
    )
    assert [(r.gpus, r.published) for r in table.rows[27:32]] == [
        (8192, 5.18),
        (2048, 14.2267),
        (2432, 12.7295),
        (2560, 11.1781),
        (512, 55.153),
    ]


def test_the_rows_carry_their_configs_settings():
    rows = load_set(TABLE).rows
    v30 = rows[0]  # v3.0: selective recompute from run_and_time.sh, VP 12, no fp8 parameters, no graphs
    assert (v30.layout["recompute"], v30.layout["vpp"], v30.layout["fp8_param_gather"], v30.layout["cuda_graphs"]) == (
        "selective",
        12,
        False,
        False,
    )
    assert v30.overrides["dropout"] is False and v30.layout["zero"] == 2
    big = rows[13]  # v4.0 1344 nodes: PP 6 x VP 8, layer CUDA graphs, fp8 parameters, MBS 1
    assert (
        big.gpus,
        big.layout["pp"],
        big.layout["vpp"],
        big.layout["cuda_graphs"],
        big.layout["fp8_param_gather"],
    ) == (
        10752,
        6,
        8,
        True,
        True,
    )
    h100 = rows[31]  # v5.0 405B on 512 H100: TP 8, CP 2, PP 8 x VP 8, embedding and loss in the split
    assert (h100.layout["tp"], h100.layout["cp"], h100.layout["pp"], h100.layout["vpp"], h100.layout["dp"]) == (
        8,
        2,
        8,
        8,
        4,
    )
    assert h100.layout["embedding_in_split"] and h100.layout["loss_in_split"] and h100.layout["fp8_recipe"] == "delayed"
    gb = rows[32]  # v5.0 405B on 256 GB200: TP 4, full-iteration CUDA graphs
    assert (gb.layout["tp"], gb.layout["dp"], gb.layout["cuda_graphs"], gb.layout["framework"]) == (
        4,
        4,
        True,
        "nemo-25.04",
    )


def test_every_row_projects_and_the_figures_stand():
    table = load_set(TABLE)
    res = validate_set(table)
    errs = [s.error for s in res]
    assert all(e is not None for e in errs)
    mean = sum(abs(e) for e in errs) / len(errs)
    # 9.3% when written (43 rows), 8.7% with [27 s16 fp8bucket]; 8.9% with the 12 rows of [27 s16 mlperfadd] (held
    # out: a change that moves it should say so); 8.4% with the step's zeroing of the gradient buffer [27 s18 zerograd]; 7.9% with the B200's sustained
    # attention rate [27 s20 attsust]; 7.0% with the Blackwell GEMM curve [27 s22 bwshape]
    # 6.6% [27 s22 bwshape, relative fit]; 6.4% with the graphed kernels' minimum run time [27 s23 graphmin]; 5.8% with
    # v5.1's NVFP4 and B300 results (74 rows: [27 s25 nvfp4], [27 s25 b300])
    assert 0.054 < mean < 0.062
    assert sum(abs(e) for e in errs[:38]) / 38 < 0.06  # GPT-3 and 405B rows 5.5%
    # the 405B H100 rows (NeMo 2.2 on ngc25.01) within 3%; the v5.0 GB200 rows optimistic by 7-11%
    assert all(abs(res[i].error) < 0.03 for i in range(27, 32))
    # +3.7..+6.9% with [27 s22 bwshape]; +1.8..+5.0% [27 s22 bwshape, relative fit]
    assert all(0.01 < res[i].error < 0.07 for i in (22, 23, 24, 25, 26, 32, 33))
    # v5.1 8B at one or two samples a GPU on 128-512 GPUs: the model is far too fast (+49..+82%; +41..+75% with the
    # fp8 bucket merge exposed [27 s16 fp8bucket])
    # +40.2 / +64.6 / +36.8% with [27 s22 bwshape]; +38.7 / +61.1 / +34.3% with [27 s22 smallring] and the relative fit;
    # +38.7 / +54.8 / +30.1% with the graphed kernels' minimum run time [27 s23 graphmin] (the two whole-step graphs)
    assert all(res[i].error > 0.28 for i in (38, 43, 45))


def test_the_8b_rows_reduce_in_the_buckets_their_configs_set():
    """[27 s16 mlperf8b] NVIDIA's and Dell's v5.1 8B configs set BUCKET_SIZE=768000000 (config_common_8b.sh), Verda's
    conf/custom.yaml keeps 134217728: Megatron-Core closes a DP bucket at that many gradient elements, against its
    default max(40M, 1M x DP) that the profile states. Fewer, larger buckets: fewer collectives, and the last one
    (ready when the backward ends) is larger. Measured when set (a correction to the source that made the table
    worse): 512 GB300 +75.1% -> +82.9%, 512 GB200 +48.5% -> +49.1%, 64 B200 +12.4% -> +14.2%; the table 9.28% ->
    9.54%."""
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.project.step import run
    from commlens.topology import load_topology
    from commlens.workload import load_workload

    rows = load_set(TABLE).rows
    # Cisco 2, Dell 2, HPE (no BUCKET_SIZE), NVIDIA 4, Oracle 8 x 8 (NVIDIA's config_common_8b.sh), UF 6 and Verda (b200_nemo's)
    buckets = [rows[i].layout.get("dp_bucket_elements") for i in range(38, 55)]
    assert buckets == [64, 64] + [768e6] * 2 + [134217728] + [768e6] * 5 + [134217728] * 7
    r = rows[54]
    lay = ParallelLayout.model_validate(r.layout)
    default = ParallelLayout.model_validate({**r.layout, "dp_bucket_elements": None})
    sc = [
        Scenario(load_workload(r.workload, r.overrides), load_topology(r.topology), x, r.gpus) for x in (lay, default)
    ]
    set_, dflt = (run(s).step_time_s for s in sc)
    assert set_ != dflt


def test_cisco_rows_reduce_each_tensor_in_its_own_bucket_on_roce():
    """[27 s16 cisco] Cisco's v5.1 8B runs set Megatron-Core's DP bucket to 64 elements (conf/custom.yaml
    bucket_size ${BUCKET_SIZE,64}): under every tensor, so each of Llama 3.1 8B's 195 parameter tensors (32 layers x
    linear_qkv's norm and weight, linear_proj, linear_fc1's norm and weight, linear_fc2; the embedding, the final
    norm, the output layer) is its own bucket, a reduce-scatter and an all-gather each with its own latency. Their
    nodes reach each other over 400 Gb/s RoCE (Cisco Silicon One G200), the cisco-h100-roce preset. Measured: 128 H100
    +51.1% -> +49.0% (exposed DP 17.5 -> 22.0 ms, overlapped 89 -> 119 ms), 64 H100 +20.4% -> +20.2%."""
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.project.step import _mcore_buckets, _setup, _stage_tensors, run
    from commlens.topology import load_topology
    from commlens.workload import load_workload

    rows = load_set(TABLE).rows
    r = rows[39]
    assert r.topology == "cisco-h100-roce" and r.layout["dp_bucket_elements"] == 64
    top = load_topology(r.topology)
    assert "RoCE" in top.scale_out.name and top.scale_out.nics_per_node == 8
    assert top.scale_out.nic_bandwidth_bytes_per_s == 5.0e10
    sc = Scenario(load_workload(r.workload, r.overrides), top, ParallelLayout.model_validate(r.layout), r.gpus)
    tensors = _stage_tensors(_setup(sc)[0], 0)
    assert len(tensors) == 195 and sum(lin for _, lin in tensors) == 128  # the TE linears' weights
    assert sum(n for n, _ in tensors) == pytest.approx(8.03e9, rel=1e-3)
    assert len(_mcore_buckets(tensors, 64)) == 195
    assert (
        len(_mcore_buckets(tensors, 768e6)) == 9
    )  # NVIDIA's BUCKET_SIZE: closed at >= 768M, not ceil(8.03e9 / 768M) = 11
    by_bucket = {}
    for i in (38, 39):
        r = rows[i]
        for b in (64, None):
            lay = ParallelLayout.model_validate({**r.layout, "dp_bucket_elements": b})
            p = run(Scenario(load_workload(r.workload, r.overrides), load_topology(r.topology), lay, r.gpus))
            by_bucket[i, b] = p
    # 0.3262 / 0.5999 s when written; 0.3443 / 0.6152 s with the non-fp8 buckets in the first layers' group, exposed
    # [27 s16 fp8bucket]; 0.3435 / 0.6144 s with that group's buckets launched once [27 s16 ppbucket]; 0.3465 /
    # 0.6204 s with the step's zeroing of the gradient buffer [27 s18 zerograd]; 0.3504 s (TP 2) with the 2-GPU ring's rate
    # [27 s22 smallring]
    assert by_bucket[38, 64].step_time_s == pytest.approx(0.3504, abs=5e-4)
    assert by_bucket[39, 64].step_time_s == pytest.approx(0.6204, abs=5e-4)
    assert by_bucket[38, 64].breakdown["dp_comm"] > by_bucket[38, None].breakdown["dp_comm"] + 0.004
    # (97 against 75 ms hidden once the merged non-fp8 group is exposed whole either way [27 s16 fp8bucket])
    assert by_bucket[38, 64].overlapped_s["dp_comm"] > by_bucket[38, None].overlapped_s["dp_comm"] + 0.015


def test_the_submissions_kept_outside_implementations_are_rows():
    """[27 s16 mlperfadd] Oracle's v4.1 GPT-3 (configs in Oracle/benchmarks/gpt3/DGXH100_<n>x8x..._mbs2/), HPE's v5.1 8B
    (under llama3_8b/), Oracle's 8-node B200 8B (Oracle/benchmarks/llama31_8b/) and the University of Florida's 8B and
    405B (hpg.dgxb200x8 configs with b200_nemo's commons) were listed as having no config files; their FP8 configs are
    there, and under the row policy they are rows. Lambda's GB300 stays out: its config sources a file it lacks."""
    from commlens.project.validate import _published_dir

    table = load_set(TABLE)
    rows, res = table.rows, validate_set(table)
    oracle = [rows[i] for i in (20, 21)]
    assert [(r.gpus, r.published, r.topology, r.layout["vpp"], r.layout["dp"]) for r in oracle] == [
        (1536, 5.2345, "meta-h100-roce", 4, 48),
        (3072, 3.3455, "meta-h100-roce", 4, 96),
    ]
    assert all(r.overrides["micro_batch"] == 2 and r.layout["fp8_param_gather"] for r in oracle)
    uf405 = [rows[i] for i in (36, 37)]
    assert [(r.gpus, r.published, r.layout["dp"], r.overrides["global_batch"]) for r in uf405] == [
        (256, 27.6133, 4, 576),
        (448, 27.9451, 7, 1008),
    ]
    assert not any(r.layout["tp_comm_overlap"] for r in uf405)  # '#export TP_COMM_OVERLAP=True' in the hpg configs
    hpe, orb = rows[42], rows[47]
    assert (hpe.topology, hpe.gpus, hpe.published, hpe.layout["cp"]) == ("dgx-h200", 64, 0.3532, 2)
    assert (orb.topology, orb.published, orb.layout["dp_bucket_elements"]) == ("b200", 0.1904, 768e6)
    uf8 = [rows[i] for i in range(48, 54)]
    assert [(r.gpus, r.published, r.layout["cp"], r.overrides["micro_batch"]) for r in uf8] == [
        (8, 0.5446, 1, 2),
        (16, 0.5745, 1, 2),
        (32, 0.1884, 2, 1),
        (64, 0.1896, 2, 1),
        (128, 0.1929, 2, 1),
        (256, 0.2213, 2, 1),
    ]
    errs = {i: res[i].error for i in (20, 21, 36, 37, 42, 47, 48, 49, 50, 51, 52, 53)}
    assert all(e is not None for e in errs.values())
    # as written: Oracle GPT-3 +2.2 / +21.5%, UF 405B +8.0 / +9.0%, HPE H200 +16.1%, Oracle B200 +9.8%, UF 8B
    # -1.8 / +2.4 / +8.1 / +8.0 / +8.3 / +21.4%; with the B200's sustained attention rate [27 s20 attsust] UF 405B
    # +5.9 / +6.9%, UF 8B -6.0 / -1.9 / +2.1 / +2.0 / +2.4 / +14.8%
    assert abs(errs[20]) < 0.04 and 0.18 < errs[21] < 0.25
    # +4.0 / +5.0% with [27 s22 bwshape]; +3.4 / +4.4% with the 4-GPU rings of TP 4 [27 s22 smallring]
    assert all(0.015 < errs[i] < 0.09 for i in (36, 37))  # +2.0 / +2.9% [27 s22 bwshape, relative fit]
    assert (
        abs(errs[48]) < 0.09 and errs[53] > 0.09
    )  # [27 s22 bwshape]: -7.3%, +11.7%; -8.2%, +10.2% [27 s22 bwshape, relative fit]
    header = (_published_dir(None) / f"{TABLE}.yaml").read_text().split("\nrows:\n")[0]
    assert "no implementation or config files" not in header
    assert "config incomplete: v5.1 8B Lambda GB300" in header
