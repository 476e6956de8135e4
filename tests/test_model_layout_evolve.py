"""``Layout.evolve`` is ``dataclasses.replace`` for the collectives' cost model, cheaper; the layout stays a value."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from commlens.model.layout import Layout, build_layout
from commlens.topology import load_topology


@pytest.mark.parametrize(("preset", "nodes"), [("dgx-h100", 4), ("gb300-nvl72", 36), ("emulated-cluster", 2)])
def test_evolve_changes_what_it_is_given_and_nothing_else(preset: str, nodes: int) -> None:
    layout = build_layout(load_topology(preset), nodes)
    before = replace(layout)
    for f in fields(Layout):
        value = getattr(layout, f.name)
        changed = (value + 1) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
        if isinstance(value, bool):
            changed = not value
        elif isinstance(value, tuple):
            changed = (*value, value[-1])
        elif isinstance(value, str):
            changed = value + "-x"
        got = layout.evolve(**{f.name: changed})
        assert got == replace(layout, **{f.name: changed}), f.name
        assert getattr(got, f.name) == changed != value, f.name
    assert layout == before  # the original is untouched
    assert layout.evolve() == layout and layout.evolve() is not layout


def test_a_multi_domain_layout_names_the_tier_spanning_the_job() -> None:
    topology = load_topology("dgx-h100")
    one = build_layout(topology, 1)
    assert one.job_tier == -1
    for nodes in (2, 16, 64, 128):
        layout = build_layout(topology, nodes)
        assert layout.job_tier == layout.tier_for_span(nodes)
        assert layout.tier_nodes[layout.job_tier] >= nodes or layout.job_tier == len(layout.tier_nodes) - 1


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(AttributeError):
        build_layout(load_topology("dgx-h100"), 2).evolve(no_such_field=1.0)
