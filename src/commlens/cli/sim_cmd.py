"""``commlens sim``: flow-level simulation of collectives, jobs and whole training steps on a fabric."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer

from commlens.cli.app import command_group, fail
from commlens.cli.errors import errors_as_exit
from commlens.cli.tables import new_table, print_table, right
from commlens.cli.topology_cmd import load_or_fail

if TYPE_CHECKING:
    from commlens.sim import Fault, SimOptions
    from commlens.sim.fabric import FabricDoc

sim_app = command_group("sim")

_CHANNELS = "NCCL channels per pair of ranks, each its own connection (NCCL duplicates its rings: 2 per NIC)"
_TOPOLOGY = "a preset (see `commlens topology list`) or a topology YAML file"


def _faults(fail_links: Sequence[str], degrade: Sequence[str]) -> tuple[Fault, ...]:
    from commlens.sim import parse_fault

    with errors_as_exit():
        return tuple(parse_fault(f, False) for f in fail_links) + tuple(parse_fault(d, True) for d in degrade)


def sim_options(
    routing: str, seed: int, qps: int, channels: int, fail_links: Sequence[str], degrade: Sequence[str]
) -> SimOptions:
    """The simulator's options from the command line, checked by :class:`SimOptions` (exit 2 naming the option)."""
    from commlens.sim import SimOptions

    faults = _faults(fail_links, degrade)
    with errors_as_exit("--"):
        return SimOptions(routing, seed, qps, channels, faults)


def _groups(nodes: int, per_node: int, gpus_per_node: int, jobs: int, placement: str) -> list[Any]:
    import numpy as np

    if jobs < 1 or nodes % jobs:
        fail(f"--jobs: {jobs} jobs do not split {nodes} nodes evenly")
    if placement not in ("packed", "interleaved"):
        fail(f"--placement: {placement!r}; known: packed, interleaved")
    per_job = nodes // jobs
    out = []
    for j in range(jobs):
        job_nodes = np.arange(j * per_job, (j + 1) * per_job) if placement == "packed" else np.arange(j, nodes, jobs)
        out.append((job_nodes[:, None] * gpus_per_node + np.arange(per_node)[None, :]).reshape(1, -1))
    return out


def _print(result: Any) -> None:
    from commlens.results.units import format_gbps, format_us

    rows = [
        (
            c.name,
            c.op,
            c.algo,
            str(c.ranks * c.groups),
            f"{c.size_bytes:.0f}",
            format_us(c.time_s),
            format_us(c.analytic_s),
            f"{c.time_s / c.analytic_s:.3f}" if c.analytic_s > 0 else "-",
            format_gbps(c.busbw_bytes_per_s),
        )
        for c in result.collectives
    ]
    print(
        f"{result.topology}, routing {result.routing}, seed {result.seed}, "
        f"channels {result.channels} x qps {result.qps}"
    )
    cols = ("collective", "op", "algo", "ranks", "size B", "time us", "analytic us", "slowdown", "busBW GB/s")
    print_table(new_table(*cols[:3], *map(right, cols[3:]), rows=rows))
    stages = [
        (s["stage"], format_us(float(s["time_s"])), format_us(float(s["analytic_s"])))
        for c in result.collectives[:8]
        for s in c.stages
    ]
    if stages:
        print("stages:")
        print_table(new_table("stage", right("time us"), right("alone us"), rows=stages), indent=2)
    if result.hottest:
        print("hottest links (mean utilisation over the run):")
        hot = [(h["link"], f"{100 * h['utilisation']:.1f}%") for h in result.hottest]
        print_table(new_table("link", right("util"), rows=hot), indent=2)
    cls = [
        (c["class"], str(c["links"]), f"{100 * c['mean_utilisation']:.1f}%", f"{100 * c['max_utilisation']:.1f}%")
        for c in result.classes
    ]
    print("links by class:")
    print_table(new_table("class", right("links"), right("mean"), right("max"), rows=cls), indent=2)
    f: FabricDoc = result.fabric
    tiers = ", ".join(f"{t['switches']} {t['name']}" for t in f["tiers"])
    faults = "; ".join(f"{d} ({n} cables)" for d, n in zip(f["faults"], f["fault_cables"].values())) or "none"
    print(f"fabric: {f['gpus']} GPUs, {tiers}, {f['links']} links; faults: {faults}")
    print(f"simulated in {result.wall_s:.2f} s ({result.events} events, {result.recomputations} rate recomputations)")


@sim_app.command("collective")
def collective(
    topology: str = typer.Option("dgx-h100", "--topology", "-t", help=_TOPOLOGY),
    nodes: int = typer.Option(2, "--nodes", "-N", help="nodes of the job (all jobs together with --jobs)"),
    ranks_per_node: int | None = typer.Option(None, "--ranks-per-node", help="default: every GPU of a node"),
    op: str = typer.Option("all_reduce", "--op", help="collective (commlens or nccl-tests name)"),
    size: str = typer.Option("1G", "--size", "-b", help="message size, nccl-tests semantics (K/M/G: powers of 1024)"),
    algo: str = typer.Option("auto", "--algo", help="algorithm (see `commlens model predict --algo`) or auto"),
    routing: str = typer.Option("ecmp", "--routing", help="ecmp, spray or both (side by side)"),
    seed: int = typer.Option(0, "--seed", help="ECMP hash seed"),
    sync: bool = typer.Option(True, "--sync/--no-sync", help="flows of a step wait for the slowest (default)"),
    qps: int = typer.Option(1, "--qps", help="queue pairs per connection (NCCL_IB_QPS_PER_CONNECTION), hashed apart"),
    channels: int = typer.Option(2, "--channels", help=_CHANNELS),
    fail_links: list[str] = typer.Option([], "--fail", help="fail a switch, NIC or link by name or pattern"),
    degrade: list[str] = typer.Option([], "--degrade", help="NAME:FACTOR, the capacity kept (e.g. leaf2-spine0:0.5)"),
    jobs: int = typer.Option(1, "--jobs", help="identical jobs sharing the fabric, one collective each"),
    placement: str = typer.Option("packed", "--placement", help="packed (consecutive nodes) or interleaved"),
    top: int = typer.Option(10, "--top", help="hottest links to list"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    plot_path: str | None = typer.Option(None, "--plot", help="write a PNG (fabric heatmap, timeline) here"),
) -> None:
    """Simulate one collective (or one per job) over every rank of the job on the topology's fabric."""
    from dataclasses import replace

    from commlens.ops import parse_ops
    from commlens.results.units import parse_size
    from commlens.sim import Collective, SimConfig, run

    topo = load_or_fail(topology)
    if routing not in ("ecmp", "spray", "both"):
        fail(f"--routing: {routing!r}; known: ecmp, spray, both")
    opts = sim_options("ecmp" if routing == "both" else routing, seed, qps, channels, fail_links, degrade)
    if nodes < 1:
        fail(f"--nodes: must be >= 1, got {nodes}")
    if top < 1:
        fail(f"--top: must be >= 1, got {top}")
    with errors_as_exit("--size: "):
        nbytes = parse_size(size)
    with errors_as_exit():
        ops = parse_ops(op)
    if len(ops) != 1:
        fail(f"--op: one collective, got {op!r}")
    per_node = topo.accelerators_per_node if ranks_per_node is None else ranks_per_node
    if not 1 <= per_node <= topo.accelerators_per_node:
        fail(f"--ranks-per-node: between 1 and {topo.accelerators_per_node}, got {per_node}")
    if jobs >= 1 and nodes % jobs == 0:  # else _groups says why
        from commlens.sim import CollectiveShape, check_sim_size

        shape = CollectiveShape(ops[0].name, float(nbytes), 1, nodes // jobs * per_node, algo)
        with errors_as_exit():  # before the groups or the fabric take memory
            check_sim_size(topo, nodes, [shape] * jobs, qps=qps, channels=channels)
    colls = tuple(
        Collective(f"job{j}" if jobs > 1 else ops[0].name, ops[0].name, float(nbytes), g, algo=algo)
        for j, g in enumerate(_groups(nodes, per_node, topo.accelerators_per_node, jobs, placement))
    )
    results = []
    for r in ("ecmp", "spray") if routing == "both" else (routing,):
        with errors_as_exit():
            results.append(run(SimConfig(topo, nodes, colls, replace(opts, routing=r), sync=sync, top=top)))
    if plot_path:
        from commlens.sim.report import plot

        try:
            plot(results[0], plot_path)
        except OSError as e:
            fail(f"--plot: cannot write {plot_path}: {e.strerror}")
    if as_json:
        docs = [r.as_dict() for r in results]
        print(json.dumps(docs[0] if len(docs) == 1 else {"runs": docs}, indent=1))
        return
    for k, res in enumerate(results):
        if k:
            print()
        _print(res)


@sim_app.command("fabric")
def fabric(
    topology: str = typer.Option("dgx-h100", "--topology", "-t", help=_TOPOLOGY),
    nodes: int = typer.Option(2, "--nodes", "-N", help="nodes of the job (only the tiers they span are built)"),
    fail_links: list[str] = typer.Option([], "--fail", help="fail a switch, NIC or link by name or pattern"),
    degrade: list[str] = typer.Option([], "--degrade", help="NAME:FACTOR, the capacity kept"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Describe the fabric a job of NODES nodes gets: tiers, switches, uplinks, links, and names to fault."""
    from commlens.sim import build_fabric, check_sim_size

    topo = load_or_fail(topology)
    with errors_as_exit():
        check_sim_size(topo, nodes, [])
        fab = build_fabric(topo, nodes).with_faults(_faults(fail_links, degrade))
    names, _ = fab.cable_names()
    doc = fab.describe()
    examples = {
        "switches": [f"{t}0" for t in fab.tier_names] + ["nvs0"],
        "nics": ["node0.nic0"],
        "cables": [names[0], names[fab.gpus]] + ([names[-1]] if len(names) > fab.gpus + 1 else []),
    }
    if as_json:
        print(json.dumps({**doc, "example_names": examples}, indent=1))
        return
    rows = [(t["name"], str(t["group_nodes"]), str(t["switches"]), str(t["uplinks_per_switch"])) for t in doc["tiers"]]
    print(
        f"{topo.name}: {doc['gpus']} GPUs on {nodes} nodes, {doc['planes']} plane(s), "
        f"{'rail-optimized' if doc['rail_optimized'] else 'not rail-optimized'}, {doc['links']} directed links"
    )
    print_table(new_table("tier", right("nodes per group"), right("switches"), right("uplinks each"), rows=rows))
    print("names: " + ", ".join(examples["switches"] + examples["nics"] + examples["cables"]))
    if doc["faults"]:
        print("faults: " + "; ".join(f"{d} ({n} cables)" for d, n in zip(doc["faults"], doc["fault_cables"].values())))


@sim_app.command("step")
def step(
    workload: str = typer.Argument(..., help="workload preset or YAML file"),
    topology: str = typer.Option(..., "--topology", "-t", help=_TOPOLOGY),
    gpus: int = typer.Option(..., "--gpus", "-n"),
    sets: list[str] = typer.Option([], "--set", help="workload.PATH=V or layout.FIELD=V"),
    routing: str = typer.Option("ecmp", "--routing", help="ecmp or spray"),
    seed: int = typer.Option(0, "--seed"),
    qps: int = typer.Option(1, "--qps", help="queue pairs per connection (NCCL_IB_QPS_PER_CONNECTION), hashed apart"),
    channels: int = typer.Option(2, "--channels", help=_CHANNELS),
    fail_links: list[str] = typer.Option([], "--fail"),
    degrade: list[str] = typer.Option([], "--degrade"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Simulate one whole training step, every TP, CP, EP, PP and DP group at once, and compare it with the
    projection."""
    from commlens.project import Scenario
    from commlens.project.simstep import simulate_step
    from commlens.project.sweep import Base, layout_from, parse_vary, point_inputs

    opts = sim_options(routing, seed, qps, channels, fail_links, degrade)
    with errors_as_exit("--set "):
        point = parse_vary([s for s in sets]) if sets else {}
    with errors_as_exit():
        flat = {k: v[0] for k, v in point.items()}
        w, topo, n, layout_over = point_inputs(Base(workload, topology, gpus, {}, {}), flat)
    with errors_as_exit():
        done = simulate_step(Scenario(w, topo, layout_from(layout_over), n, sim=opts))
    if as_json:
        print(json.dumps(done.as_dict(), indent=1, default=str))
        return
    print(
        f"{done.workload} on {n} x {done.topology}: {done.collectives} collectives, {done.micro_batches} micro-batches"
    )
    print(f"  simulated step   {done.step_time_s:.3f} s")
    print(f"  projected step   {done.projected_step_time_s:.3f} s (analytic network)")
    rows = [(k, f"{v:.3f}") for k, v in sorted(done.communication_s.items())]
    print_table(new_table("part", right("summed s"), rows=rows), indent=2)
    for h in done.hottest_links[:5]:
        print(f"  hot: {h['link']} {h['utilisation']:.1%}")
    print(f"  simulated in {done.wall_s:.1f} s ({done.events} events)")
