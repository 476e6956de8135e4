"""A communicator strided over nodes reaches as far up the fabric as its ranks range ([27 s13 roce405]).

Llama 3 405B (arXiv 2407.21783, section 3.3.2) places DP outermost ([TP, CP, PP, DP]): "DP (i.e., FSDP) is the
outermost parallelism ... communication may be across a multi-hop network with latency up to tens of
microseconds". On meta-h100-roce (3,072-GPU pods) its 64 DP ranks sit 16 hosts apart and range over 1,009 hosts,
three pods, so their collectives cross the aggregation tier; priced as 64 consecutive hosts they stayed in a pod."""

from __future__ import annotations

from commlens.model.backends import nccl_predict
from commlens.project.layout import Group
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology


def test_strided_group_records_its_span() -> None:
    from commlens.project.layout import _group

    assert _group(64, 128, 8) == Group(64, 64, 1, 63 * 16 + 1)  # DP outside TP 8 x PP 16: 16 hosts apart
    assert _group(16, 8, 8).span == 16  # PP over consecutive hosts: the span is its nodes
    assert _group(8, 1, 8).span == 0  # inside one host


def test_span_reaches_the_aggregation_tier() -> None:
    topo = load_topology("meta-h100-roce")
    size = int(64e6 * 4)  # one fp32 gradient bucket
    in_pod = nccl_predict(topo, "reduce_scatter", size, nodes=64, ranks_per_host=1).time_s
    across = nccl_predict(topo, "reduce_scatter", size, nodes=64, ranks_per_host=1, span_nodes=1009).time_s
    inside = nccl_predict(topo, "reduce_scatter", size, nodes=64, ranks_per_host=1, span_nodes=300).time_s
    assert inside == in_pod  # 300 hosts fit one 384-host pod
    assert across > in_pod * 1.5  # 63 ring steps at the aggregation tier's 2 x 10 us hops


def test_llama3_405b_dp_crosses_pods() -> None:
    table = load_set("llama3-405b-table4")
    rows = validate_set(table)
    # was 479.6 and 444.7 TFLOP/s per GPU (+11.5%, +11.2%) with DP priced inside one pod
    assert rows[0].predicted is not None and rows[0].predicted < 470.0
    assert rows[1].predicted is not None and rows[1].predicted < 430.0
