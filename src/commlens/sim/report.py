"""The simulator's figure: a fabric heatmap (mean utilisation of every link, by class) and a utilisation timeline."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from commlens.sim.fabric import Fabric
from commlens.sim.run import SimResult

__all__ = ["plot"]


def plot(result: SimResult, fabric: Fabric, path: str) -> None:
    """Write a PNG to ``path`` (atomically): per link class, its links' mean utilisation as a heatmap row block;
    below, every class's highest utilisation over time with the collectives' spans."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    util = result.link_util if result.link_util is not None else np.zeros(fabric.links)
    classes = [c for c in range(len(fabric.class_names)) if (fabric.link_class == c).any()]
    fig, axes = plt.subplots(len(classes) + 1, 1, figsize=(11, 1.2 * len(classes) + 4), squeeze=False)
    for ax, c in zip(axes[:, 0], classes):
        u = util[fabric.link_class == c]
        width = int(np.ceil(np.sqrt(u.size * 8)))
        rows = -(-u.size // width)
        grid = np.full(rows * width, np.nan)
        grid[: u.size] = u
        im = ax.imshow(
            grid.reshape(rows, width), aspect="auto", vmin=0, vmax=1, cmap="inferno", interpolation="nearest"
        )
        ax.set_yticks([])
        ax.set_xticks([])
        ax.set_ylabel(fabric.class_names[c], rotation=0, ha="right", va="center", fontsize=8)
    fig.colorbar(im, ax=axes[:-1, 0].tolist(), label="mean utilisation over the run")
    ax = axes[-1, 0]
    tl = result.timeline
    if tl["t0_s"]:
        t = np.array([tl["t0_s"], tl["t1_s"]]).T.ravel() * 1e3
        peak = np.array(tl["max_utilisation"])
        for c in classes:
            ax.plot(t, np.repeat(peak[:, c], 2), label=fabric.class_names[c], lw=1)
    for k, coll in enumerate(result.collectives[:20]):
        ax.axvspan(coll.start_s * 1e3, coll.end_s * 1e3, ymin=0, ymax=0.04, color=f"C{k % 10}", alpha=0.6)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("highest link utilisation")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    fig.suptitle(f"{result.topology}: {', '.join(c.name for c in result.collectives[:4])} ({result.routing})")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=directory)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=90)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
