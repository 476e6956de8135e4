"""Topology specs: presets load, figures match shared/reference/hardware.md, bad specs name their field."""

from __future__ import annotations

import copy

import pytest
import yaml

from commlens.topology import (
    Topology,
    TopologyError,
    dump_topology,
    list_presets,
    load_topology,
    topology_from_dict,
    topology_to_dict,
)

PRESETS = ("b200", "dgx-a100", "dgx-h100", "dgx-h200", "gb200-nvl72", "local-cpu")


def h100() -> dict:
    return topology_to_dict(load_topology("dgx-h100"))


def test_every_preset_the_issue_names_ships_and_loads() -> None:
    assert set(PRESETS) <= set(list_presets())
    for name in PRESETS:
        t = load_topology(name)
        assert isinstance(t, Topology) and t.name == name


def test_presets_carry_the_reference_line_rates() -> None:
    """shared/reference/hardware.md: per-GPU scale-up per direction, GPUs per node, NICs and their speed."""
    expected = {  # name: (GPUs per node, scale-up GB/s, domain, NICs per node, NIC Gb/s, NVLS)
        "dgx-a100": (8, 300, 8, 8, 200, False),
        "dgx-h100": (8, 450, 8, 8, 400, True),
        "dgx-h200": (8, 450, 8, 8, 400, True),
        "b200": (8, 900, 8, 8, 400, True),
        "gb200-nvl72": (4, 900, 72, 4, 400, True),
    }
    for name, (gpus, up_gbps, domain, nics, nic_gbit, nvls) in expected.items():
        t = load_topology(name)
        assert t.accelerators_per_node == gpus
        assert t.scale_up.bandwidth_bytes_per_s == up_gbps * 1e9
        assert t.scale_up.domain_size == domain
        assert t.scale_up.in_switch_reduction is nvls
        assert t.scale_out is not None and t.scale_out.nics_per_node == nics
        assert t.scale_out.nic_bandwidth_bytes_per_s == nic_gbit * 1e9 / 8
    assert load_topology("b200").approximate and load_topology("gb200-nvl72").approximate
    assert load_topology("gb200-nvl72").domain_nodes == 18


def test_every_efficiency_and_latency_says_where_it_comes_from() -> None:
    for name in PRESETS:
        t = load_topology(name)
        origins = [
            t.launch_latency_origin,
            t.pipeline_chunk_origin,
            t.accelerator.reduction_origin,
            t.accelerator.copy_origin,
            t.scale_up.efficiency_origin,
            t.scale_up.latency_origin,
        ]
        if t.scale_out is not None:
            origins += [t.scale_out.efficiency_origin, t.scale_out.latency_origin]
        assert all(o.strip() for o in origins), name


def test_a_topology_round_trips_through_yaml(tmp_path) -> None:
    t = load_topology("gb200-nvl72")
    path = tmp_path / "copy.yaml"
    dump_topology(t, path)
    assert load_topology(path) == t
    assert load_topology(str(path)) == t


def _rejected(mutate, match: str) -> None:
    data = h100()
    mutate(data)
    with pytest.raises(TopologyError, match=match):
        topology_from_dict(data, source="bad.yaml")


def test_negative_bandwidth_is_rejected_naming_the_field() -> None:
    _rejected(
        lambda d: d["scale_up"].update(bandwidth_bytes_per_s=-1.0),
        r"bad\.yaml: scale_up\.bandwidth_bytes_per_s: .*greater than 0",
    )
    _rejected(lambda d: d["scale_out"].update(nic_bandwidth_bytes_per_s=0), r"scale_out\.nic_bandwidth_bytes_per_s")


def test_a_nic_count_that_does_not_divide_the_accelerators_is_rejected() -> None:
    _rejected(
        lambda d: d["scale_out"].update(nics_per_node=3),
        r"scale_out\.nics_per_node: 3 NICs do not divide the 8 accelerators per node",
    )


def test_other_bad_values_name_their_field() -> None:
    _rejected(lambda d: d["scale_up"].update(efficiency=1.2), r"scale_up\.efficiency: .*less than or equal to 1")
    _rejected(lambda d: d["scale_up"].update(domain_size=12), r"scale_up\.domain_size: 12 is not a multiple")
    _rejected(lambda d: d["scale_out"]["tiers"][1].update(nodes=48), r"scale_out\.tiers\[1\]\.nodes: 48")
    _rejected(
        lambda d: d["scale_out"]["tiers"][0].update(oversubscription=0.5), r"scale_out\.tiers\[0\]\.oversubscription"
    )
    _rejected(lambda d: d["scale_up"].update(latency_s=-1e-6), r"scale_up\.latency_s")
    _rejected(lambda d: d["scale_up"].update(efficiency_origin="  "), r"scale_up\.efficiency_origin: must say where")
    _rejected(lambda d: d["scale_up"].pop("in_switch_efficiency"), r"scale_up\.in_switch_efficiency: needed")
    _rejected(lambda d: d["scale_up"].update(cache_bytes=1024), r"cache_bytes and cached_bandwidth")
    _rejected(lambda d: d.update(format="commlens.topology/9"), r"format: unsupported topology format")


def test_unknown_and_missing_keys_are_refused() -> None:
    _rejected(lambda d: d["scale_up"].update(bandwith_bytes_per_s=1), r"scale_up\.bandwith_bytes_per_s: unknown field")
    _rejected(lambda d: d.pop("accelerators_per_node"), r"accelerators_per_node: missing")


def test_an_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(
        TopologyError,
        match=r"unknown topology preset 'dgx-h900'; known: b200, cisco-h100-roce, deepseek-h800, dgx-a100",
    ):
        load_topology("dgx-h900")
    with pytest.raises(TopologyError, match="not found"):
        load_topology("no/such/file.yaml")


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(TopologyError, match="list.yaml: expected a mapping"):
        load_topology(path)


def test_specs_are_immutable() -> None:
    t = load_topology("dgx-h100")
    with pytest.raises(Exception):  # noqa: B017 - pydantic or dataclasses: either frozen error will do
        t.scale_up.bandwidth_bytes_per_s = 1.0  # type: ignore[misc]
    assert copy.deepcopy(t) == t
