"""The projection's collective-time cache (``step._COMM``) keys a topology by ``id()``: a topology freed while its
entries stay could hand its id to a new one with other links, whose collectives would then read the old times. The
cache keeps every topology its keys name alive, so an id cannot be reused while an entry carries it."""

from __future__ import annotations

import gc

import commlens.project.step as step
from commlens.project import ParallelLayout, project
from commlens.topology import load_topology
from commlens.workload import load_workload


def test_a_topology_in_the_cache_stays_alive_so_its_id_is_not_reused():
    w = load_workload("llama3-8b", {"seq_len": 4096, "global_batch": 64, "micro_batch": 1})
    layout = ParallelLayout(tp=1, sp=False, dp=16)
    topology = load_topology("dgx-h100").model_copy(deep=True)  # an object only this test holds
    key = id(topology)
    first = project(w, topology, layout, 16, check_memory=False).step_time_s
    assert any(k[0] == key for k in step._COMM)  # its collectives are cached under its id
    del topology
    gc.collect()
    # the cache still holds it: no new topology can be given that id while the entries carry it
    assert key in step._COMM_TOPOLOGIES and id(step._COMM_TOPOLOGIES[key]) == key
    again = project(w, step._COMM_TOPOLOGIES[key], layout, 16, check_memory=False).step_time_s
    assert again == first
