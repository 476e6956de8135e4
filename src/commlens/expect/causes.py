"""Likely causes of a verdict: the table of ``causes.yaml`` matched against signals of the run.

Signals (:func:`signals`), each with the evidence it rests on:

- from the log's facts: ``transport``, ``ib_absent``, ``gdr``, ``gdr_partial``, ``nics``, ``channels``, ``via_p2p``,
  ``via_shm``, ``via_net`` and ``env.NCCL_*`` (the command line's or NCCL's "set by environment" lines);
- from the run: ``hosts``, ``ranks_per_host``, ``op_all_reduce``, ``domains`` (the scale-up domains the job
  spans: its hosts, or fewer where one NVLink domain spans hosts, as on GB200 NVL72: traffic between them is
  what crosses the network);
- from the topology: ``scale_up_kind`` (nvlink, pcie, xgmi, cpu), ``topology_nics``, ``approximate``;
- ``nic_multiple``: where the log lists no NICs, the whole number k (fewer than the NICs assumed) of NICs whose
  rate is nearest the peak busBW, and ``nic_multiple_dev`` how far off it is (|peak / one NIC - k| / k);
- ``net_ratio``: over several scale-up domains, the peak busBW over what the node's NICs carry (NICs x one NIC's
  effective rate): the figure the network causes predict;
- figures: ``large_ratio`` / ``small_ratio`` (measured over the model's busBW, median of the bandwidth- and
  latency-bound rows), ``peak_over_one_nic`` (the best busBW over one NIC's effective rate),
  ``peak_over_pcie`` (the best busBW over the GPU's PCIe x16 link as NCCL credits it: 12, 24 or 48 GB/s for
  Gen3, 4, 5; the GPU table's ``pcie``);
- ``nvls`` (NVLS among NCCL's choices), ``nics_by_channels`` (over several hosts: half the channel count, where
  that is fewer than the NICs per node: NCCL makes at least two channels per NIC it uses);
- derived: ``p2p_off_by_env``, ``channels_limited``, ``forced_tuning``.

A cause matches when every condition of its ``when`` holds. A cause known by its figures alone also states the
plateau it predicts (``plateau``: the range of one signal, e.g. about half the NICs' rate for GPU Direct RDMA
off, from the source it cites): its ``fit`` is 1 inside that range and falls with the (log) distance outside it
(1/e at 25%), and a cause whose fit is under 0.2 is dropped. Ranking: causes evidenced by a log line (no plateau)
first, by ``weight``; then causes known by figures, by fit times specificity (1 / (the predicted range's log width
+ 0.25): of two causes that both explain the plateau, the one that predicted it more narrowly is the likelier, as a
likelihood over a narrower range is higher), then ``weight``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from commlens.expect.system import ExpectError, InferredSystem
from commlens.expect.tables import tables
from commlens.results.jsonvalue import JsonObject

__all__ = ["Cause", "CauseSpec", "Condition", "Plateau", "Signal", "causes_table", "match_causes", "signals"]

_OPS = ("is", "in", "min", "max", "set")
FIT_SCALE = 0.25  # a measured plateau 25% (in log terms) outside a cause's predicted range has fit 1/e
MIN_FIT = 0.2  # causes that explain the plateau worse than this are not named


@dataclass(frozen=True)
class Signal:
    value: Any
    evidence: str  # the log line or the figure it comes from


@dataclass(frozen=True)
class Cause:
    """A matched cause: its id, the finding it points at, title, the evidence lines, what to try, its source."""

    id: str
    finding: str
    title: str
    evidence: tuple[str, ...]
    try_: str
    source: str
    weight: int
    fit: float = 1.0  # how well the cause's predicted plateau explains the measured one (1: inside its range)
    score: float = 0.0  # figure-known causes: fit x specificity (the ranking); 0 for causes evidenced by a log line

    def as_dict(self) -> JsonObject:
        return {
            "id": self.id,
            "finding": self.finding,
            "title": self.title,
            "evidence": list(self.evidence),
            "try": self.try_,
            "source": self.source,
            "fit": round(self.fit, 3),
        }


@dataclass(frozen=True)
class Condition:
    """One condition of a cause's signature: ``signal`` compared by ``op`` (one of _OPS) with ``want``."""

    signal: str
    op: str
    want: object


@dataclass(frozen=True)
class Plateau:
    """The range of one signal a cause known by figures predicts, and why (the rate or figure it rests on)."""

    signal: str
    low: float
    high: float
    why: str


@dataclass(frozen=True)
class CauseSpec:
    """One cause of ``causes.yaml``, checked."""

    id: str
    applies_to: str  # "below" | "above"
    weight: int
    finding: str
    title: str
    when: tuple[Condition, ...]
    evidence: tuple[str, ...]
    try_: str
    source: str
    plateau: Plateau | None = None


def _text(c: Mapping[str, object], key: str, where: str) -> str:
    value = c.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ExpectError(f"causes.yaml: {where}.{key}: expected a non-empty string")
    return value


def _number(c: Mapping[str, object], key: str, where: str) -> float:
    value = c.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpectError(f"causes.yaml: {where}.{key}: expected a number")
    return float(value)


def _condition(cond: object, where: str) -> Condition:
    if not isinstance(cond, Mapping):
        raise ExpectError(f"causes.yaml: {where}: expected a mapping")
    ops = [k for k in cond if k != "signal"]
    if "signal" not in cond or len(ops) != 1 or ops[0] not in _OPS:
        raise ExpectError(f"causes.yaml: {where}: one signal and one of {', '.join(_OPS)}")
    return Condition(str(cond["signal"]), ops[0], cond[ops[0]])


def _plateau(plateau: object, where: str) -> Plateau | None:
    if plateau is None:
        return None
    if not isinstance(plateau, Mapping):
        raise ExpectError(f"causes.yaml: {where}: expected a mapping")
    out = Plateau(
        _text(plateau, "signal", where),
        _number(plateau, "min", where),
        _number(plateau, "max", where),
        _text(plateau, "why", where),
    )
    if not 0 <= out.low <= out.high:
        raise ExpectError(f"causes.yaml: {where}: expected 0 <= min <= max")
    return out


def _cause_spec(c: object, i: int) -> CauseSpec:
    where = f"causes[{i}]"
    if not isinstance(c, Mapping):
        raise ExpectError(f"causes.yaml: {where}: expected a mapping")
    missing = {"id", "applies_to", "weight", "finding", "title", "when", "evidence", "try", "source"} - set(c)
    if missing:
        raise ExpectError(f"causes.yaml: {where} lacks {', '.join(sorted(missing))}")
    when, evidence = c["when"], c["evidence"]
    if not isinstance(when, list) or not isinstance(evidence, list):
        raise ExpectError(f"causes.yaml: {where}: when and evidence are lists")
    return CauseSpec(
        id=_text(c, "id", where),
        applies_to=_text(c, "applies_to", where),
        weight=int(_number(c, "weight", where)),
        finding=_text(c, "finding", where),
        title=_text(c, "title", where),
        when=tuple(_condition(cond, f"{where}.when[{j}]") for j, cond in enumerate(when)),
        evidence=tuple(str(e) for e in evidence),
        try_=_text(c, "try", where),
        source=_text(c, "source", where),
        plateau=_plateau(c.get("plateau"), f"{where}.plateau"),
    )


@functools.cache
def causes_table() -> tuple[CauseSpec, ...]:
    """``causes.yaml``, checked once: every cause has its fields, every condition one known operator, every
    plateau a signal, 0 <= min <= max and why."""
    data = tables()["causes"]
    if not isinstance(data, dict) or data.get("format") != "commlens.expect-causes/1":
        raise ExpectError("causes.yaml: expected format commlens.expect-causes/1")
    causes = data.get("causes")
    if not isinstance(causes, list):
        raise ExpectError("causes.yaml: causes: expected a list")
    return tuple(_cause_spec(c, i) for i, c in enumerate(causes))


def _fact_signal(system: InferredSystem, fact: str, name: str) -> dict[str, Signal]:
    f = system.facts.get(fact)
    return {} if f is None else {name: Signal(f.value, f"line {f.line}: {f.text}")}


def signals(
    system: InferredSystem,
    *,
    op_names: set[str],
    peak_busbw: float,
    large_ratio: float | None,
    small_ratio: float | None,
) -> dict[str, Signal]:
    """Every signal the cause table may ask for (see the module's list)."""
    topo = system.topology
    out: dict[str, Signal] = {
        "hosts": Signal(system.hosts, f"{system.hosts} hosts"),
        "ranks_per_host": Signal(system.ranks_per_host, f"{system.ranks_per_host} ranks per host"),
        "op_all_reduce": Signal("all_reduce" in op_names, "ops " + ",".join(sorted(op_names))),
        "approximate": Signal(system.approximate, f"topology {topo.name} is approximate"),
    }
    for fact, name in (
        ("net_transport", "transport"),
        ("ib_absent", "ib_absent"),
        ("gdr", "gdr"),
        ("nics", "nics"),
        ("channels", "channels"),
        ("via_p2p", "via_p2p"),
        ("via_shm", "via_shm"),
        ("via_net", "via_net"),
        ("gdr_partial", "gdr_partial"),
    ):
        out.update(_fact_signal(system, fact, name))
    if "transport" not in out and "via_net" in out and "Socket" in str(out["via_net"].value):
        out["transport"] = Signal("Socket", out["via_net"].evidence)
    for key, value in system.env.items():
        if key.startswith("NCCL_"):
            seen = system.facts.get("env:" + key)
            where = f"line {seen.line}: {seen.text}" if seen else f"environment: {key}={value}"
            out["env." + key] = Signal(value, where)
    up_domain = topo.scale_up.domain_size
    per_node = topo.accelerators_per_node
    hosts_per_domain = max(up_domain // per_node, 1) if up_domain > per_node else 1
    domains = -(-system.hosts // hosts_per_domain)
    out["domains"] = Signal(domains, f"{domains} scale-up domain(s): {system.hosts} hosts, {up_domain} GPUs per domain")
    out["nvls"] = Signal(system.nvls_possible, "NVLS possible" if system.nvls_possible else "no NVLS")
    if domains >= 2 and "channels" in out and topo.scale_out is not None:
        # NCCL builds its inter-node rings one or more per NIC and doubles them: fewer than two channels per NIC
        # means fewer NICs in use (nccl#527: "only 6 channels ... suggesting that only 3 NICs were available")
        in_use = int(out["channels"].value) // 2
        if 1 <= in_use < topo.scale_out.nics_per_node:
            out["nics_by_channels"] = Signal(
                in_use,
                f"{out['channels'].evidence}: {int(out['channels'].value)} channels = 2 x {in_use} NICs, "
                f"of the {topo.scale_out.nics_per_node} per node",
            )
    up = topo.scale_up.name.lower()
    kind = "pcie" if "pcie" in up else "nvlink" if "nvlink" in up else "xgmi" if "infinity" in up else "cpu"
    out["scale_up_kind"] = Signal(kind, f"scale-up {topo.scale_up.name}")
    if topo.scale_out is not None:
        out["topology_nics"] = Signal(topo.scale_out.nics_per_node, f"{topo.scale_out.nics_per_node} NICs per node")
        nic = topo.scale_out.nic_bandwidth_bytes_per_s * topo.scale_out.efficiency
        multiple = peak_busbw / nic if peak_busbw > 0 else 0.0
        k = min(max(round(multiple), 1), topo.scale_out.nics_per_node - 1)
        assumed = any(n.what == "NICs per node" for n in system.assumed)
        if assumed and k >= 1 and multiple > 0:
            out["nic_multiple"] = Signal(
                k,
                f"peak busBW {peak_busbw / 1e9:.1f} GB/s = {multiple:.2f} x one NIC ({nic / 1e9:.1f} GB/s): "
                f"about {k} NICs fully used, of the {topo.scale_out.nics_per_node} assumed",
            )
            out["nic_multiple_dev"] = Signal(abs(multiple - k) / k, out["nic_multiple"].evidence)
        if domains >= 2 and peak_busbw > 0:
            carried = nic * topo.scale_out.nics_per_node
            out["net_ratio"] = Signal(
                peak_busbw / carried,
                f"peak busBW {peak_busbw / 1e9:.1f} GB/s = {peak_busbw / carried:.2f} x what "
                f"{topo.scale_out.nics_per_node} NICs carry ({carried / 1e9:.0f} GB/s)",
            )
        if peak_busbw > 0:
            out["peak_over_one_nic"] = Signal(
                peak_busbw / nic,
                f"peak busBW {peak_busbw / 1e9:.1f} GB/s = {peak_busbw / nic:.2f} x one NIC ({nic / 1e9:.1f} GB/s)",
            )
    if peak_busbw > 0:
        pcie = system.pcie_bytes_per_s
        out["peak_over_pcie"] = Signal(
            peak_busbw / pcie,
            f"peak busBW {peak_busbw / 1e9:.1f} GB/s = {peak_busbw / pcie:.2f} x {system.pcie_name} "
            f"({pcie / 1e9:.0f} GB/s)",
        )
    if large_ratio is not None:
        out["large_ratio"] = Signal(large_ratio, f"bandwidth-bound sizes at {large_ratio:.0%} of the model")
    if small_ratio is not None:
        out["small_ratio"] = Signal(small_ratio, f"latency-bound sizes at {small_ratio:.0%} of the model")
    env = system.env
    p2p_off = env.get("NCCL_P2P_DISABLE", "").strip() == "1" or env.get("NCCL_P2P_LEVEL", "").strip().upper() in (
        "LOC",
        "0",
    )
    out["p2p_off_by_env"] = Signal(p2p_off, "NCCL_P2P_DISABLE/NCCL_P2P_LEVEL")
    limited = False
    for key in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS"):
        if env.get(key, "").strip().isdigit() and int(env[key]) <= 4:
            limited = True
    if "channels" in out and kind == "nvlink" and system.ranks_per_host >= 4 and int(out["channels"].value) <= 4:
        limited = True
    out["channels_limited"] = Signal(limited, "channel count")
    forced = bool(env.get("NCCL_PROTO", "").strip()) or bool(env.get("NCCL_ALGO", "").strip())
    out["forced_tuning"] = Signal(forced, "NCCL_PROTO/NCCL_ALGO")
    return out


def _holds(cond: Condition, sig: Signal | None) -> bool:
    op, want = cond.op, cond.want
    if op == "set":
        return (sig is not None) == bool(want)
    if sig is None:
        return False
    value = sig.value
    if op == "is":
        if isinstance(want, str) or isinstance(value, str):
            return str(value).strip().lower() == str(want).strip().lower()
        return bool(value == want)
    if op == "in":
        options = want if isinstance(want, list) else [want]
        return str(value).strip().lower() in {str(w).lower() for w in options}
    try:
        number = float(value)
        limit = float(str(want))
    except (TypeError, ValueError):
        return False
    return number >= limit if op == "min" else number <= limit


def plateau_fit(plateau: Plateau, sig: Signal | None) -> float:
    """How well a cause's predicted plateau (a range of one signal) explains the measured value: 1 inside the
    range, exp(-d / FIT_SCALE) at a log distance d outside it; 0 without the signal."""
    if sig is None:
        return 0.0
    try:
        value = float(sig.value)
    except (TypeError, ValueError):
        return 0.0
    lo, hi = plateau.low, plateau.high
    if lo <= value <= hi:
        return 1.0
    if value <= 0 or (value < lo and lo <= 0):
        return 0.0
    d = math.log(lo / value) if value < lo else math.log(value / hi) if hi > 0 else math.inf
    return math.exp(-d / FIT_SCALE)


def specificity(plateau: Plateau) -> float:
    """1 / (the log width of a predicted range + FIT_SCALE); a deviation range from 0 (``min: 0``, a relative error
    such as ``nic_multiple_dev``) spans ln((1 + max) / (1 - max))."""
    lo, hi = plateau.low, plateau.high
    if lo > 0:
        width = math.log(hi / lo)
    elif hi < 1:
        width = math.log((1 + hi) / (1 - hi))
    else:
        width = math.inf
    return 1.0 / (width + FIT_SCALE)


def match_causes(status: str, sigs: dict[str, Signal]) -> list[Cause]:
    """The causes of ``causes.yaml`` for a verdict ``status`` (below / above) whose conditions all hold and whose
    predicted plateau explains the measured one (fit >= MIN_FIT), ranked as the module says."""
    found = []
    for c in causes_table():
        if c.applies_to != status or not all(_holds(cond, sigs.get(cond.signal)) for cond in c.when):
            continue
        names = list(c.evidence)
        fit, score = 1.0, 0.0
        plateau = c.plateau
        if plateau is not None:
            fit = plateau_fit(plateau, sigs.get(plateau.signal))
            if fit < MIN_FIT:
                continue
            score = fit * specificity(plateau)
            names.insert(0, plateau.signal)
        evidence = [sigs[name].evidence for name in names if name in sigs]
        if plateau is not None:
            evidence.append(
                f"predicted {plateau.signal} {plateau.low:g} to {plateau.high:g} ({plateau.why}): fit {fit:.2f}"
            )
        found.append(
            Cause(c.id, c.finding, c.title, tuple(dict.fromkeys(evidence)), c.try_, c.source, c.weight, fit, score)
        )
    return sorted(found, key=lambda c: (c.score > 0, -c.score, -c.weight))
