"""[27 s13 oversub] Where a tier's oversubscription applies, and how much of it a ring pays.

A tier's oversubscription is its switches' downlink : uplink ratio, so it slows traffic leaving that tier's
group. Meta's Llama 3 clusters have 1:7 on the uplinks of each 3,072-GPU pod (arXiv 2407.21783, 3.3.1). A ring
leaves a group once per channel (NVIDIA/nccl src/graph/connect.cc connectRings), so it pays the taper only
where those crossings outrun the group's uplinks; all-to-all traffic pays it on every rank's cross-tier bytes.
"""

from __future__ import annotations

import pytest

from commlens.model import build_layout, predict
from commlens.model.backends import nccl_predict
from commlens.topology import load_topology, topology_from_dict, topology_to_dict

META = load_topology("meta-h100-roce")
H100 = load_topology("dgx-h100")


def _flat(topology):
    d = topology_to_dict(topology)
    for tier in d["scale_out"]["tiers"]:
        tier["oversubscription"] = 1.0
    return topology_from_dict(d)


def _fabric_bw_s(pred) -> float:
    return sum(t.time_s for t in pred.terms if t.level == "scale_out" and t.kind == "bandwidth")


@pytest.mark.parametrize("name", ["meta-h100-roce", "grand-teton-h100-96gb"])
def test_meta_presets_put_the_1_to_7_on_the_pod_uplinks(name: str) -> None:
    tiers = load_topology(name).scale_out.tiers
    assert [(t.name, t.oversubscription) for t in tiers] == [("rack", 1.0), ("pod", 7.0), ("aggregation", 1.0)]
    layout = build_layout(load_topology(name), nodes=768)
    assert layout.out_taper == (1.0, 1.0, 7.0)  # traffic between pods, not within one


def test_all_to_all_between_pods_pays_the_taper_within_a_pod_does_not() -> None:
    size = 1 << 28
    flat = _flat(META)
    two_pods = nccl_predict(META, "all_to_all", size, nodes=768).time_s
    assert two_pods > 2.5 * nccl_predict(flat, "all_to_all", size, nodes=768).time_s
    one_pod = nccl_predict(META, "all_to_all", size, nodes=384).time_s
    assert one_pod == pytest.approx(nccl_predict(flat, "all_to_all", size, nodes=384).time_s)


def test_a_ring_across_pods_is_not_slowed_by_the_pod_uplinks() -> None:
    """One edge per channel leaves a pod: one host's NICs against a pod's 384 / 7."""
    size = 1 << 28
    for op in ("all_gather", "reduce_scatter"):
        got = nccl_predict(META, op, size, nodes=64, ranks_per_host=1, span_nodes=1009).time_s
        assert got == pytest.approx(
            nccl_predict(_flat(META), op, size, nodes=64, ranks_per_host=1, span_nodes=1009).time_s
        )
    assert build_layout(META, nodes=768).ring_taper() == 1.0


def test_a_ring_pays_the_taper_where_its_crossings_outrun_the_uplinks() -> None:
    """Leaves of 2 hosts at 1:4: the ring's edge out of a leaf carries a host's NICs, the leaf's uplinks half that."""
    d = topology_to_dict(H100)
    d["scale_out"]["tiers"][0].update(nodes=2, oversubscription=4.0)
    tapered = topology_from_dict(d)
    assert build_layout(tapered, nodes=64).ring_taper() == pytest.approx(2.0)
    size = 1 << 30
    ring = predict(_flat(tapered), "all_gather", size, nodes=64, algo="ring")
    ring_tapered = predict(tapered, "all_gather", size, nodes=64, algo="ring")
    assert _fabric_bw_s(ring_tapered) == pytest.approx(2.0 * _fabric_bw_s(ring))
