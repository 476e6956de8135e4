"""HybridEP's work beyond the token copies, priced from its code: every forward dispatch gathers the EP group's
routing maps and scans them (DeepEP hybrid-ep 94a9f8f6 ``metadata_preprocessing``; Megatron-LM 44151194
``HybridEPDispatch.forward`` passes no handle), across NVLink domains each dispatch call copies its tokens into the
RDMA send buffer, and the forward dispatch and its backward carry fp32 routing probabilities. [27 s9 hybridep]"""

from __future__ import annotations

import pytest

from commlens.project import ParallelLayout, project
from commlens.project.step import hybridep_probs_factor
from commlens.topology import load_topology
from commlens.workload import load_workload

# [27 s11 deepepnv] on A100's NVLink3 neither flex backend has a measured intranode rate, so both send their copies at
# the link's rate and the difference is HybridEP's own work (on H100 DeepEP runs at H800's measured share, HybridEP
# has no intranode figure)
A100 = load_topology("dgx-a100")


def _qwen3(gpus: int, dispatcher: str) -> dict[str, float]:
    """Qwen3-30B-A3B, EP over every GPU, the skills table's shape, on A100s: the step's breakdown (on 8 GPUs each holds 16
    experts, more than fits: memory is not checked)."""
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "global_batch": 4 * gpus, "micro_batch": 1})
    layout = ParallelLayout(
        tp=1, sp=False, ep=gpus, zero=1, recompute="none", framework="nemo", moe_dispatcher=dispatcher
    )
    return project(w, A100, layout, gpus, check_memory=False).breakdown  # the EP time, not whether it fits


def test_the_probabilities_weigh_most_at_small_hidden_sizes():
    # Qwen3-30B on two H100 nodes: 64 experts a node, 4 B each, against 2 x 2048 B of token; two of four transfers
    assert hybridep_probs_factor(128, 2048, 2, 16) == pytest.approx(1.0 + 0.5 * 256 / 4096)
    # DeepSeek-V3's hidden 7168 with 256 experts over 8 nodes: 32 experts a node
    assert hybridep_probs_factor(256, 7168, 8, 64) == pytest.approx(1.0 + 0.5 * 128 / 14336)
    # within one domain the copy goes to a GPU, which holds fewer experts
    assert hybridep_probs_factor(128, 2048, 1, 8) < hybridep_probs_factor(128, 2048, 2, 16)


@pytest.mark.parametrize("gpus", [8, 16])
def test_hybridep_pays_its_preprocessing_where_deepep_does_not(gpus: int):
    """Same layout, same token copies per destination (deepep_share): HybridEP's EP time is longer by its
    routing-map gather, its scan, and across nodes its send-buffer copies and the probabilities."""
    hybrid = _qwen3(gpus, "hybridep")["ep_comm"]
    deepep = _qwen3(gpus, "deepep")["ep_comm"]
    assert hybrid > deepep
    # the extra is a few percent of the transfers, not a multiple of them
    assert hybrid < 1.25 * deepep


def test_the_extra_grows_across_nodes():
    """Two nodes: the gather crosses InfiniBand, the tokens are copied to the send buffer, and each copy carries a
    node's 64 probabilities rather than a GPU's 16."""
    one = _qwen3(8, "hybridep")["ep_comm"] / _qwen3(8, "deepep")["ep_comm"]
    two = _qwen3(16, "hybridep")["ep_comm"] / _qwen3(16, "deepep")["ep_comm"]
    assert two > one > 1.0
