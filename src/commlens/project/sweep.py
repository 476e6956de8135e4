"""What-if sweeps: grids over workload, layout, topology fields and GPU count; layout search; executors.

A point is a dict of dotted overrides: ``workload.seq_len``, ``layout.pp``,
``topology.scale_out.nic_bandwidth_bytes_per_s`` (alias ``topology.nic_gbps``:
Gb/s per NIC), ``topology.scale_up_domain`` (a scale-up domain of N accelerators: one node of N, with the
NICs per accelerator kept), ``gpus``. Points are evaluated in order; results come back in
the same order whatever the executor (``local``: a process pool; ``ray``: Ray
tasks, address from ``RAY_ADDRESS``), so a sweep's output is stable.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from commlens.project.errors import InfeasibleLayoutError, ProjectionError
from commlens.specdata import SpecValue

if TYPE_CHECKING:
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.project.step import Projection
    from commlens.sim import SimOptions
    from commlens.topology import Topology
    from commlens.workload import Workload

__all__ = [
    "Base",
    "Overrides",
    "SweepResult",
    "SweepRow",
    "evaluate",
    "grid",
    "parse_vary",
    "point_inputs",
    "layout_from",
    "point_scenario",
    "project_point",
    "run_sweep",
    "search_layouts",
]

# A point: dotted paths (workload.seq_len, layout.tp, topology.nic_gbps, gpus) -> the values they take
Overrides: TypeAlias = dict[str, SpecValue]

TOPOLOGY_ALIASES = {
    "nic_gbps": ("scale_out.nic_bandwidth_bytes_per_s", 1e9 / 8),
    "scale_up_gbytes": ("scale_up.bandwidth_bytes_per_s", 1e9),
}
SCALE_UP_DOMAIN = "scale_up_domain"  # topology.scale_up_domain=N: see _set_scale_up_domain


@dataclass(frozen=True)
class Base:
    """What every point starts from: names (presets or paths) and plain-data overrides; with a point's own
    overrides, one :class:`commlens.project.Scenario` (:func:`point_scenario`). Plain data: a sweep ships it to
    its workers."""

    workload: str
    topology: str
    gpus: int
    layout: Mapping[str, SpecValue]  # ParallelLayout's fields
    workload_overrides: Mapping[str, SpecValue]  # dotted workload paths
    accelerators: tuple[str, ...] | None = None  # accelerators files (None: COMMLENS_ACCELERATORS)
    sim: SimOptions | None = None  # the network simulated with these options (commlens.sim); None: analytic


def _value(text: str) -> object:
    from commlens.specdata import load_yaml

    return load_yaml(text)


def _value_problem(path: str, value: SpecValue) -> str | None:
    """Why ``value`` cannot be given to ``path``: NaN/inf anywhere (no field takes them), ``gpus`` a whole number
    >= 1, the Gb/s aliases a finite number > 0 (``true`` would be read as 1)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if path == "gpus" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        return f"gpus must be a whole number >= 1, got {value!r}"
    alias = path.partition(".")[2]
    if path == f"topology.{SCALE_UP_DOMAIN}" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        return f"{SCALE_UP_DOMAIN} must be a whole number >= 1, got {value!r}"
    if (
        path.startswith("topology.")
        and alias in TOPOLOGY_ALIASES
        and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0)
    ):
        return f"{alias} must be a number > 0, got {value!r}"
    return None


def _number(path: str, value: SpecValue) -> int | float | str:
    """``value`` where a number is expected (``int()``/``float()`` read it): a number or its text."""
    if not isinstance(value, (int, float, str)):
        raise ProjectionError(f"{path}: expected a number, got {value!r}")
    return value


def _split_values(values: str) -> list[str]:
    """``v1,v2,...`` split at the commas outside brackets, so that one value may be a YAML flow mapping or list
    (``{attention: bf16, latent: bf16}``, ``[attn, mamba]``)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(values):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            out.append(values[start:i])
            start = i + 1
    out.append(values[start:])
    return out


def parse_vary(specs: Iterable[str]) -> dict[str, list[SpecValue]]:
    """``path=v1,v2`` -> {path: [v1, v2]}; values parsed as YAML scalars. An error names the spec or its path,
    not the option it came from (``sweep --vary``, ``project --set``, ``sim step --set``): the caller says."""
    import yaml

    from commlens.specdata import DuplicateKeyError, is_spec_value

    out: dict[str, list[SpecValue]] = {}
    for spec in specs:
        path, sep, values = spec.partition("=")
        path = path.strip()
        if not sep or not values:
            raise ProjectionError(f"{spec!r}: expected path=v1,v2,...")
        if path != "gpus" and path.split(".")[0] not in ("workload", "layout", "topology"):
            raise ProjectionError(f"{path}: the path starts with workload., layout., topology. or is gpus")
        try:
            parsed = [_value(v) for v in _split_values(values)]
        except DuplicateKeyError as e:
            raise ProjectionError(f"{path}: {e}") from None
        except yaml.YAMLError as e:
            raise ProjectionError(f"{path}: not a YAML value: {str(e).splitlines()[0]}") from None
        out[path] = []
        for value in parsed:
            if not is_spec_value(value):  # YAML's dates, timestamps and bytes: no field takes them
                raise ProjectionError(f"{path}={value}: not a number, string, list or mapping")
            problem = _value_problem(path, value)
            if problem is not None:
                raise ProjectionError(f"{path}={value}: {problem}")
            out[path].append(value)
    return out


def grid(vary: Mapping[str, list[SpecValue]]) -> list[Overrides]:
    """Every combination, in the order given (last field varying fastest)."""
    keys = list(vary)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(vary[k] for k in keys))]


_TOPO_CACHE: dict[tuple[str, str], Topology] = {}
_WL_CACHE: dict[tuple[str, str], Workload] = {}


def _key(overrides: tuple[tuple[str, SpecValue], ...]) -> str:
    """The overrides as a cache key: a list or mapping value is not hashable, its JSON text is."""
    import json

    return json.dumps(overrides, sort_keys=True)


def _topology(name: str, overrides: tuple[tuple[str, SpecValue], ...]) -> Topology:
    from commlens.topology import load_topology, topology_from_dict, topology_to_dict
    from commlens.workload import override

    key = (name, _key(overrides))
    hit = _TOPO_CACHE.get(key)
    if hit is None:
        topo = load_topology(name)
        if overrides:
            data = topology_to_dict(topo)
            for path, value in overrides:
                if path == SCALE_UP_DOMAIN:
                    _set_scale_up_domain(data, int(_number(f"topology.{path}", value)))
                    continue
                if path in TOPOLOGY_ALIASES:
                    value = float(_number(f"topology.{path}", value)) * TOPOLOGY_ALIASES[path][1]
                    path = TOPOLOGY_ALIASES[path][0]
                override(data, path, value)
            topo = topology_from_dict(data, source=f"{name} with {dict(overrides)}")
        hit = _TOPO_CACHE[key] = topo
    return hit


def _set_scale_up_domain(data: dict[str, object], size: int) -> None:
    """A scale-up domain of ``size`` accelerators: one node of ``size`` (accelerators_per_node and
    scale_up.domain_size both ``size``), with as many NICs per accelerator as before; links, tiers (in nodes)
    and everything else as they were. A what-if: the same accelerators in a bigger NVLink-class domain.
    ``data``: a checked topology's plain data (``topology_to_dict``)."""
    per_node, scale_out, scale_up = data["accelerators_per_node"], data.get("scale_out"), data["scale_up"]
    assert isinstance(per_node, int) and isinstance(scale_up, dict), "topology_to_dict's shape"
    if isinstance(scale_out, dict):
        nics = scale_out["nics_per_node"] * size
        if nics % per_node:
            raise ProjectionError(
                f"topology.{SCALE_UP_DOMAIN}={size}: {scale_out['nics_per_node']} NICs per {per_node} accelerators "
                f"do not scale to a whole number per {size}"
            )
        scale_out["nics_per_node"] = nics // per_node
    data["accelerators_per_node"] = size
    scale_up["domain_size"] = size


def _workload(name: str, overrides: tuple[tuple[str, SpecValue], ...]) -> Workload:
    from commlens.workload import load_workload

    key = (name, _key(overrides))
    hit = _WL_CACHE.get(key)
    if hit is None:
        hit = _WL_CACHE[key] = load_workload(name, dict(overrides))
    return hit


def project_point(base: Base, point: Mapping[str, SpecValue], search: bool = False) -> Projection:
    """The projection of one point: ``base`` with the point's overrides (``workload.*``, ``layout.*``,
    ``topology.*``, ``gpus``); the best layout with ``search``. Raises the projection's errors, and pydantic's
    ValueError for a layout field that is out of range."""
    from commlens.project.step import run

    if search:
        w, topo, gpus, layout_over = point_inputs(base, point)
        return search_layouts(w, topo, gpus, layout_over, accelerators=base.accelerators, sim=base.sim)
    return run(point_scenario(base, point))


def point_scenario(base: Base, point: Mapping[str, SpecValue]) -> Scenario:
    """The scenario of one point: ``base``'s presets with its overrides and the point's, loaded and checked (the
    workload's, the topology's and the projection's errors; a layout field's as :func:`layout_from` says it)."""
    from commlens.project.scenario import Scenario

    w, topo, gpus, layout_over = point_inputs(base, point)
    return Scenario(w, topo, layout_from(layout_over), gpus, accelerators=base.accelerators, sim=base.sim)


def layout_from(fields: Mapping[str, object]) -> ParallelLayout:
    """The :class:`ParallelLayout` of ``fields``, or :class:`ProjectionError` ``layout: field: reason; ...`` naming
    each field pydantic refused (a sweep's row shows it, the CLI exits 2 with it)."""
    from pydantic import ValidationError

    from commlens.project.layout import ParallelLayout

    try:
        return ParallelLayout.model_validate(fields)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{loc}: {msg}" if loc else msg)
        raise ProjectionError("layout: " + "; ".join(problems)) from None


def point_inputs(base: Base, point: Mapping[str, SpecValue]) -> tuple[Workload, Topology, int, Overrides]:
    """The workload, topology, GPU count and layout fields of ``base`` with the point's overrides (the
    loaded workload and topology are cached)."""
    wl_over = dict(base.workload_overrides)
    topo_over: list[tuple[str, SpecValue]] = []
    layout_over = dict(base.layout)
    gpus = base.gpus
    for path, value in point.items():
        head, _, rest = path.partition(".")
        if path == "gpus":
            gpus = int(_number(path, value))
        elif head == "workload":
            wl_over[rest] = value
        elif head == "layout":
            layout_over[rest] = value
        else:
            topo_over.append((rest, value))
    return (
        _workload(base.workload, tuple(sorted(wl_over.items()))),
        _topology(base.topology, tuple(topo_over)),
        gpus,
        layout_over,
    )


@dataclass(frozen=True)
class SweepRow:
    """One point of a sweep: its overrides, and its projection's figures or why it cannot run."""

    point: Overrides
    error: str | None = None  # why the point cannot run (None: it ran)
    kind: str = ""  # the infeasibility's kind (InfeasibleLayoutError.kind), or "invalid"
    figures: dict[str, float] = field(default_factory=dict)  # step_time_s, tokens_per_s, mfu, ... (ran)
    layout: dict[str, object] = field(default_factory=dict)  # the layout resolved (Projection.layout; ran)

    def as_dict(self) -> dict[str, object]:
        """The row as ``sweep --json`` prints it: the point's fields, then the figures and layout or the error."""
        if self.error is not None:
            return {**self.point, "error": self.error, "kind": self.kind}
        return {**self.point, **self.figures, "layout": self.layout}


def evaluate(base: Base, point: Overrides, search: bool = False) -> SweepRow:
    """One point: its projection's figures, or the reason it cannot run and its kind."""
    try:
        p = project_point(base, point, search)
    except InfeasibleLayoutError as e:
        return SweepRow(point, str(e), e.kind)
    except (ProjectionError, ValueError) as e:
        return SweepRow(point, str(e).splitlines()[0], "invalid")
    figures = {
        "step_time_s": p.step_time_s,
        "tokens_per_s": p.tokens_per_s,
        "mfu": p.mfu,
        "model_tflops_per_gpu": p.model_tflops_per_gpu,
        "memory_gb": p.memory_bytes_per_gpu / 1e9,
    }
    return SweepRow(point, figures=figures, layout=p.layout)


def search_layouts(
    w: Workload,
    topo: Topology,
    gpus: int,
    fixed: Mapping[str, SpecValue],
    *,
    accelerators: tuple[str, ...] | None = None,
    sim: SimOptions | None = None,
) -> Projection:
    """The fastest feasible layout (TP within the scale-up domain, PP dividing layers, CP, VPP, EP, ZeRO);
    ``fixed``: layout fields kept; ``sim``: the simulator's options (None: the analytic network)."""
    from commlens.project.layout import ParallelLayout
    from commlens.project.scenario import Scenario
    from commlens.project.step import run

    domain = topo.scale_up.domain_size
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= domain and w.heads % t == 0]
    pps = [p for p in (1, 2, 4, 8, 16, 32, 64) if w.layers % p == 0 and p <= gpus]
    cps = [c for c in (1, 2, 4, 8, 16) if w.seq_len >= 8192 or c == 1]
    eps = [e for e in (1, 2, 4, 8, 16, 32, 64) if w.moe and w.moe.experts % e == 0] if w.moe else [1]
    best: Projection | None = None
    reasons: Counter[str] = Counter()
    for tp, pp, cp, ep in itertools.product(tps, pps, cps, eps):
        for vpp in (1, 2, 4) if pp > 1 else (1,):
            for zero in (1, 3):
                fields = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vpp, "zero": zero, **fixed}
                try:
                    layout = ParallelLayout.model_validate(fields)
                    p = run(Scenario(w, topo, layout, gpus, accelerators=accelerators, sim=sim))
                except InfeasibleLayoutError as e:
                    reasons[e.kind] += 1
                    continue
                if best is None or p.step_time_s < best.step_time_s:
                    best = p
    if best is None:
        raise InfeasibleLayoutError(f"no feasible layout on {gpus} GPUs ({dict(reasons)})", "search")
    return best


def _chunk(args: tuple[Base, list[Overrides], bool]) -> list[SweepRow]:
    base, points, search = args
    return [evaluate(base, p, search) for p in points]


@dataclass
class SweepResult:
    rows: list[SweepRow]

    @property
    def feasible(self) -> list[SweepRow]:
        return [r for r in self.rows if r.error is None]

    def infeasible_reasons(self) -> Counter[str]:
        """Count of infeasible points per reason kind and first words of the reason."""
        return Counter(f"{r.kind}: {_reason_key(r.error)}" for r in self.rows if r.error is not None)

    def best(self, metric: str = "tokens_per_s", n: int = 5) -> list[SweepRow]:
        reverse = metric not in ("step_time_s", "memory_gb")
        return sorted(self.feasible, key=lambda r: r.figures[metric], reverse=reverse)[:n]


def _reason_key(reason: str) -> str:
    import re

    return re.sub(r"\d+(\.\d+)?", "N", reason)


def run_sweep(
    base: Base,
    points: list[Overrides],
    *,
    search: bool = False,
    executor: str = "local",
    workers: int | None = None,
) -> SweepResult:
    """Evaluate ``points`` (in order) locally in a process pool, serially (``workers=1``), or on Ray.

    The accelerators files are settled here, once, and travel to the workers with ``base``."""
    import os
    from dataclasses import replace

    from commlens.project.hardware import accelerator_files

    if base.accelerators is None:
        base = replace(base, accelerators=accelerator_files())
    workers = workers or os.cpu_count() or 1
    if executor == "ray":
        return SweepResult(_run_ray(base, points, search))
    if executor != "local":
        raise ProjectionError(f"unknown executor {executor!r}; known: local, ray")
    if workers == 1 or len(points) < 64:
        return SweepResult(_chunk((base, points, search)))
    size = -(-len(points) // (workers * 4))
    chunks = [(base, points[i : i + size], search) for i in range(0, len(points), size)]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        rows = [row for part in pool.map(_chunk, chunks) for row in part]
    return SweepResult(rows)


def _run_ray(base: Base, points: list[Overrides], search: bool) -> list[SweepRow]:
    try:
        import ray
    except ImportError:
        raise ProjectionError("--executor ray needs Ray: pip install ray") from None
    import os
    import socket

    address = os.environ.get("RAY_ADDRESS") or None  # None: a Ray instance of its own, on this machine
    started = not ray.is_initialized()
    if started:
        # ray.init retries a GCS that does not answer for minutes (Ray 2.60 gave up on 127.0.0.1:9 after 13):
        # a host:port that refuses a TCP connection, or does not answer in 5 s, is refused here instead.
        host, sep, port = (address or "").removeprefix("ray://").rpartition(":")
        if sep and host and port.isdigit():
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
            except OSError as e:
                reason = e.strerror or str(e) or type(e).__name__
                raise ProjectionError(f"--executor ray: no Ray cluster at RAY_ADDRESS={address}: {reason}") from None
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        except ConnectionError as e:
            where = f"RAY_ADDRESS={address}" if address else "this machine (RAY_ADDRESS unset)"
            raise ProjectionError(
                f"--executor ray: cannot connect to Ray at {where}: {str(e).splitlines()[0]}"
            ) from None
    try:
        task = ray.remote(_chunk)  # calibrated figures: base names the files (paths must be visible to workers)
        size = max(1, -(-len(points) // (int(ray.available_resources().get("CPU", 1)) * 4)))
        refs = [task.remote((base, points[i : i + size], search)) for i in range(0, len(points), size)]
        return [row for part in ray.get(refs) for row in part]
    finally:
        if started:
            ray.shutdown()


def plot(result: SweepResult, vary: Mapping[str, list[SpecValue]], metric: str, path: str) -> None:
    """A PNG of ``metric`` over the first varied field, one line per combination of the others."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(vary)
    x_key, others = keys[0], keys[1:]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[tuple[SpecValue, ...], list[tuple[SpecValue, float]]] = {}
    for r in result.feasible:
        series.setdefault(tuple(r.point[k] for k in others), []).append((r.point[x_key], r.figures[metric]))
    for label, pts in series.items():
        numbers = [x for x, _ in pts if isinstance(x, (int, float))]
        xs = numbers if len(numbers) == len(pts) else list(range(len(pts)))
        ax.plot(
            xs, [y for _, y in pts], marker="o", label=", ".join(f"{k}={v}" for k, v in zip(others, label)) or metric
        )
    ax.set_xlabel(x_key)
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)
    if others:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
