"""[27 s21 span] A strided communicator on a topology whose scale-up domain holds several nodes (NVL72 racks of 18
trays): its ranks sit in as many racks as its stride puts them in, not in as few as the same nodes side by side, so
its ring crosses the scale-out fabric (an expert-data-parallel group of MoE training on GB200 racks)."""

from __future__ import annotations

from commlens.model.backends import nccl_predict
from commlens.model.predict import layout_for
from commlens.topology import load_topology

GB200 = load_topology("gb200-nvl72")
H100 = load_topology("dgx-h100")
SIZE = 9_200_000_000  # a stage's expert gradients in bf16 (DeepSeek-V3, PP 4, EP 32)


def test_four_ranks_eight_trays_apart_sit_in_two_racks_and_cross_the_fabric():
    strided = layout_for(GB200, 4, 1, 25)  # trays 0, 8, 16, 24: racks of 18 trays hold the first three
    assert (strided.domains, strided.domain_nodes) == (2, 2) and strided.multi_domain
    side_by_side = layout_for(GB200, 4, 1, 0)
    assert not side_by_side.multi_domain
    far = nccl_predict(GB200, "reduce_scatter", SIZE, nodes=4, ranks_per_host=1, span_nodes=25).time_s
    near = nccl_predict(GB200, "reduce_scatter", SIZE, nodes=4, ranks_per_host=1).time_s
    # over NVLink the 6.9 GB a rank sends take ~10 ms; across racks each rank's own 400 Gb/s NIC carries them
    assert near < 0.015 and far > 5 * near


def test_sixty_four_strided_ranks_hold_a_few_a_rack_not_sixteen():
    strided = layout_for(GB200, 64, 1, 505)  # 8 trays apart: 3 of them in a rack of 18 trays
    assert strided.domains >= 22 and strided.domain_nodes <= 3
    assert layout_for(GB200, 64, 1, 0).domain_nodes == 16  # side by side: 4 racks of 16 trays
    far = nccl_predict(GB200, "reduce_scatter", SIZE, nodes=64, ranks_per_host=1, span_nodes=505).time_s
    near = nccl_predict(GB200, "reduce_scatter", SIZE, nodes=64, ranks_per_host=1).time_s
    assert far > 5 * near


def test_one_node_domains_and_groups_inside_one_rack_are_unchanged():
    # a DGX H100's domain is its node: a strided group already has one rank a domain; only its tier climbs
    assert layout_for(H100, 4, 1, 25).domains == layout_for(H100, 4, 1, 0).domains == 4
    # on GB200, a group whose span fits in one rack stays on NVLink
    inside = layout_for(GB200, 4, 1, 13)  # trays 0, 4, 8, 12
    assert not inside.multi_domain
