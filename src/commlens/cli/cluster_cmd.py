"""``commlens cluster up|down|set|status``: an emulated multi-host cluster (network namespaces, shaped links)."""

from __future__ import annotations

import json
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import command_group, fail
from commlens.cli.errors import errors_as_exit
from commlens.cli.numbers import checked

if TYPE_CHECKING:
    from commlens.cluster.lifecycle import HostStatus
    from commlens.cluster.state import ClusterDoc

cluster_app = command_group("cluster")

GBPS_HELP = "each host's link rate in Gb/s (1e9 bit/s)"
NAME_HELP = "cluster name (namespaces are cl-NAME-hK); also as --name NAME"


def _name_argument(help_text: str = NAME_HELP) -> str | None:
    return typer.Argument(None, metavar="NAME", help=help_text, show_default=False)


def _name_option() -> str | None:
    return typer.Option(None, "--name", help="the cluster name, as the NAME argument", show_default=False)


def _optional_cluster_name(positional: str | None, option: str | None) -> str | None:
    """One cluster name given either as NAME or as ``--name NAME`` (both: they must agree), checked as ``up``
    checks it before anything is built from it; None when neither is given."""
    from commlens.cluster.spec import check_name

    if positional is not None and option is not None and positional != option:
        fail(f"two cluster names given: {positional!r} and --name {option!r}", 2)
    name = positional if positional is not None else option
    if name is not None:
        with errors_as_exit("cluster "):
            check_name(name)
    return name


def _cluster_name(positional: str | None, option: str | None) -> str:
    """As :func:`_optional_cluster_name`, for a command that needs the name."""
    name = _optional_cluster_name(positional, option)
    if name is None:
        fail("give the cluster name, as NAME or --name NAME", 2)
    return name


def _faults(slow_host: list[str], slow_link: list[str], cpu_starve: list[str]) -> dict:
    from commlens.cluster import parse_slow_host, parse_slow_link, parse_starved_host

    return {
        "slow_hosts": tuple(parse_slow_host(s) for s in slow_host),
        "slow_links": tuple(parse_slow_link(s) for s in slow_link),
        "starved_hosts": tuple(parse_starved_host(s) for s in cpu_starve),
    }


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so that `up`'s clean-up runs when it is terminated


@cluster_app.command("up")
def up_cmd(
    name_arg: str | None = _name_argument(),
    name_opt: str | None = _name_option(),
    hosts: int = typer.Option(..., "--hosts", help="number of hosts, numbered from 0"),
    link_gbps: float = typer.Option(1.0, "--link-gbps", help=GBPS_HELP),
    ranks_per_host: int = typer.Option(1, "--ranks-per-host", help="default ranks per host for bench --cluster"),
    slow_host: list[str] = typer.Option([], "--slow-host", help="H:FRACTION: host H's link at FRACTION of the rate"),
    slow_link: list[str] = typer.Option([], "--slow-link", help="A-B:FRACTION: traffic between A and B at FRACTION"),
    cpu_starve: list[str] = typer.Option([], "--cpu-starve", help="H:CPUS: host H's ranks share CPUS of one CPU"),
    as_json: bool = typer.Option(False, "--json", help="print the cluster as JSON"),
) -> None:
    """Create the cluster; on any failure everything created so far is removed."""
    from commlens.cluster import ClusterSpec, up

    name = _cluster_name(name_arg, name_opt)
    checked(link_gbps, "--link-gbps", above=0)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    with errors_as_exit():
        spec = ClusterSpec(
            name=name,
            hosts=hosts,
            link_bytes_per_s=link_gbps * 1e9 / 8,
            ranks_per_host=ranks_per_host,
            **_faults(slow_host, slow_link, cpu_starve),
        )
        state = up(spec)
    _print(state.to_dict(), as_json)


@cluster_app.command("down")
def down_cmd(name_arg: str | None = _name_argument(), name_opt: str | None = _name_option()) -> None:
    """Remove the cluster: namespaces, veth pairs, qdiscs, bridge, cgroups and its state file."""
    from commlens.cluster import down

    name = _cluster_name(name_arg, name_opt)
    with errors_as_exit():
        down(name)
    print(f"cluster {name} removed")


@cluster_app.command("set")
def set_cmd(
    name_arg: str | None = _name_argument(),
    name_opt: str | None = _name_option(),
    link_gbps: float | None = typer.Option(None, "--link-gbps", help=GBPS_HELP),
    slow_host: list[str] = typer.Option([], "--slow-host", help="H:FRACTION (replaces the slow hosts)"),
    slow_link: list[str] = typer.Option([], "--slow-link", help="A-B:FRACTION (replaces the slow links)"),
    cpu_starve: list[str] = typer.Option([], "--cpu-starve", help="H:CPUS (adds or changes a CPU quota)"),
    clear: bool = typer.Option(False, "--clear", help="remove the slow hosts and links first"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Change the rate or the faults of a running cluster, effective at once."""
    from commlens.cluster import change, load_state, require_root

    name = _cluster_name(name_arg, name_opt)
    if link_gbps is not None:
        checked(link_gbps, "--link-gbps", above=0)
    with errors_as_exit():
        require_root()
        old = load_state(name).spec
        f = _faults(slow_host, slow_link, cpu_starve)
        updates = {
            "slow_hosts": f["slow_hosts"] or (() if clear else old.slow_hosts),
            "slow_links": f["slow_links"] or (() if clear else old.slow_links),
            "starved_hosts": f["starved_hosts"] or old.starved_hosts,
        }
        if link_gbps is not None:
            updates["link_bytes_per_s"] = link_gbps * 1e9 / 8
        state = change(name, **updates)
    _print(state.to_dict(), as_json)


@cluster_app.command("status")
def status_cmd(
    name_arg: str | None = _name_argument("cluster name, also as --name NAME (default: list all)"),
    name_opt: str | None = _name_option(),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show a cluster (or all): hosts, addresses, rates, faults, and whether its objects exist."""
    from commlens.cluster import list_states, require_root, status

    name = _optional_cluster_name(name_arg, name_opt)
    with errors_as_exit():
        require_root()
        if name is None:
            out = [s.to_dict() for s in list_states()]
            if as_json:
                print(json.dumps(out, indent=2))
            else:
                for s in out:
                    print(f"{s['name']}: {s['hosts']} hosts, {s['status']}, {s['subnet']}")
            return
        st = status(name)
    _print(st, as_json, st["host_status"])
    if not st["healthy"]:
        raise typer.Exit(1)


def _print(d: ClusterDoc, as_json: bool, hosts: Sequence[HostStatus] = ()) -> None:
    """The cluster (``hosts``: each as the kernel has it, from ``status``), or ``d`` as JSON."""
    if as_json:
        print(json.dumps(d, indent=2))
        return
    print(
        f"cluster {d['name']}: {d['hosts']} hosts on {d['subnet']} (bridge {d['bridge_address']}), "
        f"link {d['link_bytes_per_s'] * 8 / 1e9:g} Gb/s, {d['status']}"
    )
    for h, addr in enumerate(d["addresses"]):
        line = f"  host {h}: cl-{d['name']}-h{h} {addr}"
        for row in hosts:
            if row["host"] == h:
                line += f" rate {row['rate_bytes_per_s'] * 8 / 1e9:g} Gb/s" + ("" if row["present"] else " MISSING")
        print(line)
    f = d["faults"]
    for x in f["slow_hosts"]:
        print(f"  fault: host {x['host']} at {x['fraction']:g} of the link rate")
    for x in f["slow_links"]:
        print(f"  fault: link {x['a']}-{x['b']} at {x['fraction']:g} of the link rate")
    for x in f["starved_hosts"]:
        print(f"  fault: host {x['host']} ranks limited to {x['cpu_fraction']:g} CPU")
