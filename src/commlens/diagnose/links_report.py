"""Display of a links diagnosis: the bandwidth matrix as a table, the faults, and a heatmap PNG."""

from __future__ import annotations

from pathlib import Path

from commlens.diagnose.links_analysis import LinkDiagnosis
from commlens.results.text_tables import new_table, render_table, right
from commlens.results.units import format_gbps, format_us

__all__ = ["format_report", "write_heatmap"]


def format_report(d: LinkDiagnosis) -> str:
    """Bandwidth matrix in GB/s (GB = 1e9 B), median latency in µs, ring check and faults."""
    n = d.hosts
    lines = [
        f"# point-to-point bandwidth (GB/s, row host sends to column host, {d.size_bytes} B messages, {d.passes} passes)"
    ]
    lines.append(
        _matrix(n, [["-" if v is None else format_gbps(v, decimals=3) for v in row] for row in d.bandwidth_bytes_per_s])
    )
    lines.append("# latency (µs, median half round trip of 8 B)")
    lines.append(_matrix(n, [[format_us(v, decimals=1) for v in row] for row in d.latency_s]))
    lines.append(
        f"# expected {d.expected_bytes_per_s / 1e9:.3f} GB/s; noise {d.noise_rel:.1%}; "
        f"a pair is low below {d.low_ratio:.2f}x expected"
    )
    if d.ring:
        lines.append(
            f"# ring (all ranks send and receive at once): {d.ring['bytes_per_s'] / 1e9:.3f} GB/s "
            f"({d.ring['ratio']:.2f}x expected)"
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
