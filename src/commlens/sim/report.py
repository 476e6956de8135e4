"""The simulator's figure: a fabric heatmap (mean utilisation of every link, by class) and a utilisation timeline."""

from __future__ import annotations

from typing import Any

import numpy as np

from commlens.files import atomic_bytes
from commlens.sim.fabric import Fabric
from commlens.sim.runner import SimResult

__all__ = ["plot"]


def _class_matrix(fabric: Fabric, cls: int, util: np.ndarray) -> tuple[np.ndarray, str, str]:
    """Class ``cls``'s links as a matrix (rows: a device's ports, columns: the devices) with its axis labels.

    Links are numbered in blocks (see :mod:`commlens.sim.fabric`): NVLink by GPU (node-major), NIC cables by
    (plane, node, NIC), a tier's cables by (switch, uplink); each class is one such block.
    """
    u = util[fabric.link_class == cls]
    if cls < 2:
        shape, cols, rows = (fabric.nodes, fabric.gpus_per_node), "node", "GPU"
    elif cls < 4:
        shape, cols, rows = (fabric.planes * fabric.nodes, fabric.nics_per_node), "node (per plane)", "NIC"
    else:
        t = (cls - 4) // 2
        shape, cols, rows = (fabric.switches[t], fabric.uplinks[t]), f"{fabric.tier_names[t]} switch", "uplink"
    if shape[0] * shape[1] != u.size:  # a class not laid out as above: a plain strip
        return u[None, :], "link", ""
    return u.reshape(shape).T, cols, rows


def plot(result: SimResult, path: str, fabric: Fabric | None = None) -> None:
    """Write a PNG of ``result`` to ``path`` (atomically), over ``fabric`` (default: the one it ran on).

    1. Per link class, a heatmap of its links' mean utilisation over the run: columns are the nodes or switches,
       rows their GPUs, NICs or uplinks (a hot uplink or a dead switch shows as a stripe).
    2. Below, every class's highest (solid) and mean (dashed) link utilisation over time, with each collective's
       span as a bar along the time axis.
    """
    fabric = fabric if fabric is not None else result.graph
    if fabric is None:
        raise ValueError("plot: the result carries no fabric (pass the one it ran on)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    util = result.link_util if result.link_util is not None else np.zeros(fabric.links)
    classes = [c for c in range(len(fabric.class_names)) if (fabric.link_class == c).any()]
    fig = plt.figure(figsize=(11, 1.3 * len(classes) + 4.5))
    grid = fig.add_gridspec(
        len(classes) + 1, 2, height_ratios=[1.0] * len(classes) + [3.5], width_ratios=[40, 1], hspace=0.75
    )
    image: Any = None
    for k, c in enumerate(classes):
        ax = fig.add_subplot(grid[k, 0])
        matrix, xlabel, ylabel = _class_matrix(fabric, c, util)
        image = ax.imshow(matrix, aspect="auto", vmin=0, vmax=1, cmap="inferno", interpolation="nearest")
        ax.set_yticks([])
        ax.tick_params(axis="x", labelsize=6, pad=1)
        ax.set_title(f"{fabric.class_names[c]}: {xlabel} x {ylabel}".rstrip(" x"), fontsize=7, loc="left", pad=2)
    fig.colorbar(image, cax=fig.add_subplot(grid[: len(classes), 1]), label="mean utilisation")
    ax = fig.add_subplot(grid[-1, 0])
    tl = result.timeline
    if tl["t0_s"]:
        t = np.array([tl["t0_s"], tl["t1_s"]]).T.ravel() * 1e3
        peak, mean = np.array(tl["max_utilisation"]), np.array(tl["mean_utilisation"])
        for k, c in enumerate(classes):
            colour = f"C{k % 10}"
            ax.plot(t, np.repeat(peak[:, c], 2), color=colour, lw=1.2, label=fabric.class_names[c])
            ax.plot(t, np.repeat(mean[:, c], 2), color=colour, lw=0.8, ls="--")
    for k, coll in enumerate(result.collectives[:20]):
        y = -0.04 - 0.04 * (k % 5)
        ax.plot([coll.start_s * 1e3, coll.end_s * 1e3], [y, y], color="0.3", lw=3, solid_capstyle="butt")
        ax.annotate(coll.name, (coll.start_s * 1e3, y), fontsize=6, va="bottom", ha="left", xytext=(1, 2),
                    textcoords="offset points")  # fmt: skip
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("link utilisation (max solid, mean dashed)", fontsize=8)
    ax.set_ylim(-0.25, 1.05)
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    fig.suptitle(f"{result.topology}: {', '.join(c.name for c in result.collectives[:4])} ({result.routing})")
    try:
        with atomic_bytes(path) as fp:
            fig.savefig(fp, format="png", dpi=90)
    finally:
        plt.close(fig)
