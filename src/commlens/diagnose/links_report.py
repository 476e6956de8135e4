"""Display of a links diagnosis: the bandwidth matrix as a table, the faults, and a heatmap PNG."""

from __future__ import annotations

from pathlib import Path

from commlens.diagnose.links_analysis import LinkDiagnosis
from commlens.diagnose.links_groups import describe
from commlens.results.text_tables import new_table, render_table, right
from commlens.results.units import format_gbps, format_us

__all__ = ["format_report", "write_heatmap"]


def format_report(d: LinkDiagnosis) -> str:
    """Bandwidth matrix in GB/s (GB = 1e9 B), median latency in µs, ring check and faults; for group tests
    the tests run (the matrix then holds only the edges they measured)."""
    n = d.hosts
    measured = "measured edges only, " if d.strategy == "groups" else ""
    lines = [
        f"# point-to-point bandwidth (GB/s, row host sends to column host, {measured}{d.size_bytes} B messages, "
        f"{d.passes} passes)"
    ]
    lines.append(
        _matrix(n, [["-" if v is None else format_gbps(v, decimals=3) for v in row] for row in d.bandwidth_bytes_per_s])
    )
    if any(v is not None for row in d.latency_s for v in row):
        lines.append("# latency (µs, median half round trip of 8 B)")
        lines.append(_matrix(n, [[format_us(v, decimals=1) for v in row] for row in d.latency_s]))
    if d.group_tests is not None:
        lines.append(
            f"# group tests ({d.rounds} measurement rounds: {d.rounds // max(d.passes, 1)} x {d.passes} passes)"
        )
        lines.append(_tests(d))
    if d.strategy == "pairs":
        lines.append(
            f"# expected {d.expected_bytes_per_s / 1e9:.3f} GB/s; noise {d.noise_rel:.1%}; "
            f"a pair is low below {d.low_ratio:.2f}x expected"
        )
    else:
        lines.append(
            f"# expected {d.expected_bytes_per_s / 1e9:.3f} GB/s (the screen's edges); noise {d.noise_rel:.1%} "
            f"(of the pair tests' exchanges); a test is low below the bar of its row"
        )
    if d.ring:
        lines.append(
            f"# ring (all ranks send and receive at once): {d.ring['bytes_per_s'] / 1e9:.3f} GB/s "
            f"({d.ring['ratio']:.2f}x expected)"
        )
    if d.unresolved:
        lines.append(
            f"# unresolved: hosts {', '.join(map(str, d.unresolved))} (no host tested good to compare them with; "
            "run --strategy pairs)"
        )
    if not d.faults:
        lines.append("healthy: no slow host or slow link")
    for f in d.faults:
        who = f"host {f.hosts[0]}" if f.kind == "slow_host" else f"link {f.hosts[0]}-{f.hosts[1]}"
        lines.append(
            f"FAULT {f.kind} {who}: {f.measured_bytes_per_s / 1e9:.3f} GB/s vs "
            f"{f.expected_bytes_per_s / 1e9:.3f} expected, confidence {f.confidence:.2f} — {f.evidence}"
        )
    return "\n".join(lines)


def _tests(d: LinkDiagnosis) -> str:
    """One row per group test: its round, what it was for, its hosts, its rate against expected."""
    rows = (
        [
            str(t["round"]),
            t["purpose"],
            describe(t),
            format_gbps(t["bytes_per_s"], decimals=3),
            f"{t['ratio']:.2f}x",
            f"{t['low_below']:.2f}x",
            f"{t['low_passes']}/{d.passes}",
            "low" if t["low"] else "ok",
        ]
        for t in d.group_tests or []
    )
    table = new_table(
        right("round"),
        "test",
        "hosts",
        right("GB/s"),
        right("vs expected"),
        right("low below"),
        right("low in"),
        "verdict",
        rows=rows,
    )
    return render_table(table).rstrip("\n")


def _matrix(hosts: int, cells: list[list[str]]) -> str:
    """A host-by-host matrix: a row per sending host, a column per receiving one (no trailing newline)."""
    columns = [right("host"), *(right(str(j)) for j in range(hosts))]
    return render_table(new_table(*columns, rows=([str(i), *row] for i, row in enumerate(cells)))).rstrip("\n")


def write_heatmap(d: LinkDiagnosis, path: Path) -> None:
    """The bandwidth matrix as a heatmap, each cell labelled in GB/s, faults in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    m = np.array([[np.nan if v is None else v / 1e9 for v in row] for row in d.bandwidth_bytes_per_s])
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * d.hosts, 0.8 + 0.6 * d.hosts))
    im = ax.imshow(m, cmap="viridis", vmin=0, vmax=max(np.nanmax(m), d.expected_bytes_per_s / 1e9))
    for i in range(d.hosts):
        for j in range(d.hosts):
            if not np.isnan(m[i, j]):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", color="w", fontsize=8)
    ax.set_xticks(range(d.hosts))
    ax.set_yticks(range(d.hosts))
    ax.set_xlabel("host")
    ax.set_ylabel("host")
    fig.colorbar(im, ax=ax, label="GB/s, row sends to column")
    names = [f"{f.kind} {'-'.join(map(str, f.hosts))}" for f in d.faults]
    ax.set_title("; ".join(names) if names else "healthy", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
