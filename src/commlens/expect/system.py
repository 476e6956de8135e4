"""The system a run ran on, inferred from what the run carries, mapped to a topology the model can read.

Steps of :func:`infer_system`:

1. The GPU: the run's device names (nccl-tests' ``#  Rank`` lines, bench's fingerprint), else a device line of
   the log; matched against the GPU table of ``systems.yaml`` (first pattern that matches), which names the
   preset topology and, for PCIe or cut-down NVLink parts, the scale-up link to put in its place.
2. The job's shape: hosts and ranks per host from the run; a node wider than the preset's becomes as wide.
3. The network, for a run over several hosts: NICs counted from ``NET/IB : Using ...`` (else from an
   ``NCCL_IB_HCA`` that lists the devices NCCL may use), their rate from
   ``speed=`` or the topology's ``NET[..]``, or from the fabric table when the log names a cloud fabric (EFA);
   what the log does not show is taken from the preset and said to be assumed.
4. NVLS: left out of the algorithms NCCL may pick when the log says it is unavailable, when NCCL is older than
   2.17, or when the scale-up level is not an NVSwitch.

``--topology`` (``topology=``) replaces steps 1-3: the given topology is used as it is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from commlens.errors import CommlensError
from commlens.expect.evidence import Fact
from commlens.expect.tables import preset_data, tables
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.records import Run
from commlens.topology.errors import TopologyError
from commlens.topology.plain import AnyTopology, plain_topology

if TYPE_CHECKING:
    from commlens.topology import Topology

__all__ = ["ExpectError", "InferredSystem", "NicOption", "Note", "infer_system", "systems_table"]

NVLS_MIN_VERSION = (2, 17, 0)  # NCCL 2.17 introduced NVLink SHARP (NVLS) collectives


class ExpectError(CommlensError, ValueError):
    """A run the verdict cannot judge (no GPU known, no rows), or a bad table shipped with the package."""


@dataclass(frozen=True)
class Note:
    """One inference or assumption: what, its value, and where it came from (a log line or the run)."""

    what: str
    value: str
    source: str  # "line 12: NCCL INFO NET/IB : Using [0]mlx5_0:1/IB" or "run: system.device_names"

    def as_dict(self) -> dict[str, str]:
        return {"what": self.what, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class NicOption:
    """A documented network build of the run's GPU class with less bandwidth per node than the reference system's:
    where the log lists no NICs, the run may be on it (``networks`` of the GPU table)."""

    label: str  # "4 x 100 Gb/s"
    topology: AnyTopology
    origin: str  # the document the build comes from

    @property
    def node_bytes_per_s(self) -> float:
        out = self.topology.scale_out
        return 0.0 if out is None else out.nics_per_node * out.nic_bandwidth_bytes_per_s


@dataclass(frozen=True)
class InferredSystem:
    """The topology to judge with (the one given, or a plain one derived from a preset), and how it was reached."""

    topology: AnyTopology
    gpu: str
    hosts: int
    ranks_per_host: int
    nccl_version: str
    nvls_possible: bool
    approximate: bool
    facts: dict[str, Fact]
    inferred: tuple[Note, ...] = ()
    assumed: tuple[Note, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    # where the log lists no NICs: the documented builds of the GPU class with less network per node than the
    # reference, fewest first (the verdict is judged on the fewest that can reach the measured busBW)
    nic_options: tuple[NicOption, ...] = ()
    pcie_name: str = "PCIe Gen4 x16"  # the GPU's host link (the GPU table's `pcie`), and its rate as NCCL credits it
    pcie_bytes_per_s: float = 24e9

    @property
    def nic_label(self) -> str:
        out = self.topology.scale_out
        return "" if out is None else f"{out.nics_per_node} x {out.nic_bandwidth_bytes_per_s * 8 / 1e9:g} Gb/s"

    def as_dict(self) -> JsonObject:
        return {
            "topology": self.topology.name,
            "gpu": self.gpu,
            "hosts": self.hosts,
            "ranks_per_host": self.ranks_per_host,
            "nccl_version": self.nccl_version,
            "nvls_possible": self.nvls_possible,
            "approximate": self.approximate,
            "inferred": [n.as_dict() for n in self.inferred],
            "assumed": [n.as_dict() for n in self.assumed],
            "nic_options": [{"nics": o.label, "origin": o.origin} for o in self.nic_options],
        }


class Link(NamedTuple):
    """A scale-up or host link of ``links`` in ``systems.yaml``. (The table's records are NamedTuples, not
    dataclasses: ``ingest`` judges every run in a fresh process, and a NamedTuple class costs a tenth to create.)"""

    name: str
    bandwidth_bytes_per_s: float
    efficiency: float
    origin: str
    latency_s: float


class NetworkBuild(NamedTuple):
    """A network of ``systems.yaml``: a GPU's ``network`` or one of its ``networks``, or a cloud fabric."""

    nics: int
    nic_bandwidth_bytes_per_s: float
    origin: str


class GpuEntry(NamedTuple):
    """One row of the GPU table: the pattern it matches, the preset and what replaces the preset's parts."""

    match: str
    name: str
    preset: str
    ranks_per_host: int | None = None  # matches only at this many ranks per host
    assumed: str = ""  # the name does not say the model: why this one is assumed
    scale_up: str | None = None  # a link of ``links`` in place of the preset's scale-up
    pcie: str = "pcie4"
    network: NetworkBuild | None = None  # in place of the preset's NICs
    networks: tuple[NetworkBuild, ...] = ()  # documented builds with less network per node


class CloudFabric(NamedTuple):
    """A cloud fabric a log names by its OFI provider, for the GPUs its pattern matches."""

    provider: str
    gpu: str
    build: NetworkBuild


class SystemsTable(NamedTuple):
    gpus: tuple[GpuEntry, ...]
    links: dict[str, Link]
    fabrics: tuple[CloudFabric, ...]


def _optional_text(data: Mapping[str, JsonValue], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ExpectError(f"systems.yaml: {where}.{key}: expected text, got {value!r}")


def _text(data: Mapping[str, JsonValue], key: str, where: str) -> str:
    value = _optional_text(data, key, where)
    if value is None:
        raise ExpectError(f"systems.yaml: {where}.{key}: missing")
    return value


def _optional_count(data: Mapping[str, JsonValue], key: str, where: str) -> int | None:
    value = data.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ExpectError(f"systems.yaml: {where}.{key}: expected a whole number, got {value!r}")


def _number(data: Mapping[str, JsonValue], key: str, where: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpectError(f"systems.yaml: {where}.{key}: expected a number, got {value!r}")
    return value


def _mapping(value: JsonValue, where: str) -> Mapping[str, JsonValue]:
    if not isinstance(value, Mapping):
        raise ExpectError(f"systems.yaml: {where}: expected a mapping")
    return value


def _list(value: JsonValue, where: str) -> Sequence[JsonValue]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ExpectError(f"systems.yaml: {where}: expected a list")
    return value


def _network(value: JsonValue, where: str) -> NetworkBuild:
    data = _mapping(value, where)
    count = _optional_count(data, "nics", where)
    if count is None:
        raise ExpectError(f"systems.yaml: {where}.nics: missing")
    return NetworkBuild(count, _number(data, "nic_bandwidth_bytes_per_s", where), _text(data, "origin", where))


def _gpu_entry(value: JsonValue, where: str) -> GpuEntry:
    data = _mapping(value, where)
    if not {"match", "name", "preset"} <= set(data):
        raise ExpectError(f"systems.yaml: {where} needs match, name and preset")
    network = data.get("network")
    return GpuEntry(
        match=_text(data, "match", where),
        name=_text(data, "name", where),
        preset=_text(data, "preset", where),
        ranks_per_host=_optional_count(data, "ranks_per_host", where),
        assumed=_optional_text(data, "assumed", where) or "",
        scale_up=_optional_text(data, "scale_up", where),
        pcie=_optional_text(data, "pcie", where) or "pcie4",
        network=None if network is None else _network(network, f"{where}.network"),
        networks=tuple(
            _network(n, f"{where}.networks[{j}]") for j, n in enumerate(_list(data.get("networks", []), where))
        ),
    )


def _link(value: JsonValue, where: str) -> Link:
    data = _mapping(value, where)
    return Link(
        name=_text(data, "name", where),
        bandwidth_bytes_per_s=_number(data, "bandwidth_bytes_per_s", where),
        efficiency=_number(data, "efficiency", where),
        origin=_text(data, "origin", where),
        latency_s=_number(data, "latency_s", where),
    )


def _cloud_fabric(value: JsonValue, where: str) -> CloudFabric:
    data = _mapping(value, where)
    return CloudFabric(_text(data, "provider", where), _text(data, "gpu", where), _network(data, where))


@functools.cache
def systems_table() -> SystemsTable:
    """``systems.yaml``, checked once."""
    data = tables()["systems"]
    if not isinstance(data, dict) or data.get("format") != "commlens.expect-systems/1":
        raise ExpectError("systems.yaml: expected format commlens.expect-systems/1")
    links = {str(k): _link(v, f"links.{k}") for k, v in _mapping(data.get("links"), "links").items()}
    gpus = tuple(_gpu_entry(g, f"gpus[{i}]") for i, g in enumerate(_list(data.get("gpus"), "gpus")))
    for i, gpu in enumerate(gpus):
        for key, name in (("scale_up", gpu.scale_up), ("pcie", gpu.pcie)):
            if name is not None and name not in links:
                raise ExpectError(f"systems.yaml: gpus[{i}].{key} {name!r} is not in links")
    fabrics = tuple(_cloud_fabric(f, f"fabrics[{i}]") for i, f in enumerate(_list(data.get("fabrics", []), "fabrics")))
    return SystemsTable(gpus, links, fabrics)


def _at(fact: Fact) -> str:
    return fact.text if fact.line == 0 else f"line {fact.line}: {fact.text}"


def _version(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", text)[:3]
    return tuple(int(p) for p in parts) if parts else ()


def _gpu_matches(entry: GpuEntry, gpu: str, ranks_per_host: int) -> bool:
    """Whether a GPU table entry names this device (its pattern, and the ranks per host it requires, if any)."""
    if not re.search(entry.match, gpu, re.IGNORECASE):
        return False
    return entry.ranks_per_host is None or entry.ranks_per_host == ranks_per_host


def _level(data: JsonObject, key: str) -> JsonObject:
    """A level of a preset's plain data (``scale_up``, ``scale_out``), to change in place."""
    value = data.get(key)
    if not isinstance(value, dict):
        raise ExpectError(f"preset data: {key}: expected a mapping, got {value!r}")
    return value


def _whole(data: Mapping[str, JsonValue], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExpectError(f"preset data: {key}: expected a whole number, got {value!r}")
    return value


def _rate(data: Mapping[str, JsonValue], key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpectError(f"preset data: {key}: expected a number, got {value!r}")
    return value


def _hca_count(value: str) -> int | None:
    """NICs an ``NCCL_IB_HCA`` list selects: the devices it names (``mlx5_0:1,mlx5_1`` -> 2); None for an exclusion
    list (``^...``), a prefix match without ``=``, or nothing named. NCCL uses only the listed devices."""
    text = value.strip().lstrip("=")
    if not text or text.startswith("^"):
        return None
    devices = {part.split(":")[0].strip() for part in text.split(",") if part.strip()}
    if not devices or not all(d[-1:].isdigit() for d in devices):  # "mlx5" is a prefix: every mlx5_N device
        return None
    return len(devices)


def _largest_divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= max(limit, 1))


def infer_system(run: Run, facts: list[Fact], topology: Topology | None = None) -> InferredSystem:
    """The system of ``run`` (see the module's steps); :class:`ExpectError` when the GPU is unknown."""
    by_name: dict[str, Fact] = {}
    for f in facts:
        by_name.setdefault(f.name, f)
    inferred: list[Note] = []
    assumed: list[Note] = []
    sysinfo = run.system
    hosts = max(len(sysinfo.hosts), 1)
    ranks_per_host = max(sysinfo.ranks_per_host.values()) if sysinfo.ranks_per_host else run.world_size // hosts
    ranks_per_host = max(ranks_per_host, 1)
    inferred.append(Note("hosts x ranks per host", f"{hosts} x {ranks_per_host}", "run: system.hosts"))
    env = dict(sysinfo.env)
    for f in facts:
        if f.name.startswith("env:"):
            env.setdefault(f.name[4:], str(f.value))
    nccl_version = sysinfo.backend_version or str(by_name["nccl_version"].value if "nccl_version" in by_name else "")
    if nccl_version:
        where = _at(by_name["nccl_version"]) if "nccl_version" in by_name else "run: system.backend_version"
        inferred.append(Note("NCCL version", nccl_version, where))

    names = [n for n in sysinfo.device_names if n]
    if names:
        gpu, gpu_source = names[0], "run: system.device_names (nccl-tests '#  Rank' line or bench fingerprint)"
    elif "gpu" in by_name:
        gpu, gpu_source = str(by_name["gpu"].value), _at(by_name["gpu"])
    elif sysinfo.device == "cpu":
        gpu, gpu_source = "cpu", "run: system.device"
    else:
        gpu, gpu_source = "", ""
    approximate = False
    table = systems_table()
    topo: AnyTopology
    nic_options: tuple[NicOption, ...] = ()
    pcie = table.links["pcie4"]
    if topology is not None:
        inferred.append(Note("topology", topology.name, "given (--topology)"))
        if gpu:
            inferred.append(Note("GPU", gpu, gpu_source))
        topo = topology
        nvls = topology.scale_up.in_switch_reduction
    else:
        if not gpu:
            raise ExpectError("the run does not name its GPU (no device line, no NCCL INFO device); give --topology")
        entry = next((g for g in table.gpus if _gpu_matches(g, gpu, ranks_per_host)), None)
        if entry is None:
            raise ExpectError(f"no topology known for GPU {gpu!r}; give --topology (a preset or a file)")
        if entry.assumed:  # a name that does not say the model: taken from the job's shape, said so
            inferred.append(Note("GPU", gpu, gpu_source))
            assumed.append(Note("GPU model", entry.name, f"GPU table: {entry.assumed}"))
            approximate = True
        else:
            inferred.append(Note("GPU", f"{gpu} ({entry.name})", gpu_source))
        pcie = table.links[entry.pcie]
        try:
            data = preset_data(entry.preset)
        except TopologyError as e:
            raise ExpectError(f"systems.yaml: preset {entry.preset!r}: {e}") from None
        data.pop("calibration", None)
        changes = [f"preset {entry.preset}"]
        if entry.scale_up:
            link = table.links[entry.scale_up]
            data["scale_up"] = {
                "name": link.name,
                "domain_size": _whole(data, "accelerators_per_node"),
                "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
                "efficiency": link.efficiency,
                "efficiency_origin": link.origin,
                "latency_s": link.latency_s,
                "latency_origin": "PCIe/NVLink step latency, approximate",
                "in_switch_reduction": False,
            }
            changes.append(f"scale-up {link.name}")
            assumed.append(Note("scale-up link", link.name, f"GPU table: {entry.name} ({link.origin})"))
            approximate = True
        if ranks_per_host > _whole(data, "accelerators_per_node"):
            data["accelerators_per_node"] = ranks_per_host
            _level(data, "scale_up")["domain_size"] = ranks_per_host
            changes.append(f"{ranks_per_host} GPUs per node")
        if entry.network is not None and data.get("scale_out") is not None:
            net, out = entry.network, _level(data, "scale_out")
            out["nics_per_node"] = _largest_divisor_at_most(_whole(data, "accelerators_per_node"), net.nics)
            out["nic_bandwidth_bytes_per_s"] = net.nic_bandwidth_bytes_per_s
            out["name"] = net.origin
            changes.append(net.origin)
        if hosts > 1 and data.get("scale_out") is not None:
            approximate |= _derive_network(data, by_name, env, gpu, hosts, table, inferred, assumed, changes)
        data["name"] = f"{entry.preset}-as-inferred" if len(changes) > 1 else entry.preset
        data["description"] = "derived from the run: " + ", ".join(changes)
        data["approximate"] = bool(data.get("approximate")) or approximate
        try:
            topo = plain_topology(data, source="inferred topology")
            nic_options = _nic_options(entry, data, hosts, assumed)
        except TopologyError as e:
            raise ExpectError(f"cannot build a topology for this run: {e}") from None
        inferred.append(Note("topology", f"{topo.name} ({topo.description})", "GPU table and the notes above"))
        nvls = topo.scale_up.in_switch_reduction
    nvls = _nvls_possible(nvls, by_name, nccl_version, env, inferred, assumed)
    return InferredSystem(
        topology=topo,
        gpu=gpu,
        hosts=hosts,
        ranks_per_host=ranks_per_host,
        nccl_version=nccl_version,
        nvls_possible=nvls,
        approximate=approximate or bool(topo.approximate),
        facts=by_name,
        inferred=tuple(inferred),
        assumed=tuple(assumed),
        env=env,
        nic_options=nic_options,
        pcie_name=pcie.name,
        pcie_bytes_per_s=float(pcie.bandwidth_bytes_per_s) * float(pcie.efficiency),
    )


def _nvls_possible(
    nvls: bool,
    by_name: dict[str, Fact],
    nccl_version: str,
    env: dict[str, str],
    inferred: list[Note],
    assumed: list[Note],
) -> bool:
    """Step 4 of :func:`infer_system`: NVLS among NCCL's choices (the switch has it, and the log, NCCL's version and
    the environment do not rule it out); said as inferred or assumed."""
    if not nvls:
        return False
    if "nvls_available" in by_name and by_name["nvls_available"].value is False:
        inferred.append(Note("NVLS", "not available", _at(by_name["nvls_available"])))
        return False
    if nccl_version and _version(nccl_version) < NVLS_MIN_VERSION:
        inferred.append(Note("NVLS", f"not in NCCL {nccl_version} (needs 2.17)", "NCCL version"))
        return False
    if env.get("NCCL_NVLS_ENABLE") == "0":
        inferred.append(Note("NVLS", "disabled", "NCCL_NVLS_ENABLE=0"))
        return False
    if "nvls_available" not in by_name and "nvls_channels" not in by_name:
        assumed.append(Note("NVLS", "may or may not be used (the log does not say)", "band spans ring and NVLS"))
    return True


def _nic_options(entry: GpuEntry, data: JsonObject, hosts: int, assumed: list[Note]) -> tuple[NicOption, ...]:
    """Where the NIC count was assumed: the documented builds of the GPU class (``networks`` of the GPU table) with
    less network bandwidth per node than the reference system, fewest first; said as assumed. A run whose busBW is
    beyond one of them cannot be on it: the verdict judges on the fewest that can reach it (see ``verdict``)."""
    if hosts < 2 or data.get("scale_out") is None or not any(n.what == "NICs per node" for n in assumed):
        return ()
    out = _level(data, "scale_out")
    nics, rate_each = _whole(out, "nics_per_node"), _rate(out, "nic_bandwidth_bytes_per_s")
    reference = nics * rate_each
    options = []
    for build in entry.networks:
        count = _largest_divisor_at_most(_whole(data, "accelerators_per_node"), build.nics)
        rate = float(build.nic_bandwidth_bytes_per_s)
        if count * rate >= reference:
            continue
        label = f"{count} x {rate * 8 / 1e9:g} Gb/s"
        scale_out = {
            **out,
            "nics_per_node": count,
            "nic_bandwidth_bytes_per_s": rate,
            "name": f"{label} NICs, documented",
        }
        topo = plain_topology(
            {**data, "name": f"{data['name']}-{count}x{rate * 8 / 1e9:g}g", "scale_out": scale_out},
            source="inferred topology, a documented network build",
        )
        options.append(NicOption(label, topo, build.origin))
    options.sort(key=lambda o: o.node_bytes_per_s)
    if options:
        ref = f"{nics} x {rate_each * 8 / 1e9:g} Gb/s"
        builds = ", ".join(o.label for o in options)
        assumed.append(
            Note(
                "NICs per node, range",
                f"{builds} or {ref} (judged on the fewest that reach the measured busBW; give --nics to judge on one)",
                "GPU table: " + "; ".join(o.origin for o in options),
            )
        )
    return tuple(options)


def _derive_network(
    data: JsonObject,
    by_name: dict[str, Fact],
    env: dict[str, str],
    gpu: str,
    hosts: int,
    table: SystemsTable,
    inferred: list[Note],
    assumed: list[Note],
    changes: list[str],
) -> bool:
    """Step 3 of :func:`infer_system`, on the topology's plain data; True if something was assumed."""
    out = _level(data, "scale_out")
    per_node = _whole(data, "accelerators_per_node")
    guessed = False
    transport = by_name.get("net_transport")
    if transport is not None:
        inferred.append(Note("network transport", str(transport.value), _at(transport)))
    provider = by_name.get("ofi_provider")
    fabric = None
    if provider is not None:
        fabric = next(
            (
                f.build
                for f in table.fabrics
                if f.provider == str(provider.value).lower() and re.search(f.gpu, gpu, re.IGNORECASE)
            ),
            None,
        )
    nics = by_name.get("nics")
    if fabric is not None and provider is not None:
        out["nics_per_node"] = _largest_divisor_at_most(per_node, fabric.nics)
        out["nic_bandwidth_bytes_per_s"] = fabric.nic_bandwidth_bytes_per_s
        out["name"] = fabric.origin
        inferred.append(
            Note(
                "NICs",
                f"{fabric.nics} x {fabric.nic_bandwidth_bytes_per_s * 8 / 1e9:g} Gb/s",
                _at(provider) + f" -> {fabric.origin}",
            )
        )
        changes.append(f"{fabric.nics} {provider.value} NICs")
        return True
    hca = env.get("NCCL_IB_HCA")
    listed = _hca_count(hca) if hca is not None else None
    if nics is None and listed is not None:  # the environment names the NICs NCCL may use
        where = by_name.get("env:NCCL_IB_HCA")
        nics = Fact("nics", listed, 0, _at(where) if where is not None else f"environment: NCCL_IB_HCA={hca}")
        by_name["nics"] = nics  # a fact of the run like the log's, for the causes
    if nics is not None:
        count = int(nics.value)
        fitted = _largest_divisor_at_most(per_node, count)
        out["nics_per_node"] = fitted
        inferred.append(Note("NICs per node", str(count), _at(nics)))
        if fitted != count:
            assumed.append(Note("NICs used", str(fitted), f"{count} NICs do not divide {per_node} GPUs"))
        changes.append(f"{fitted} NICs")
    else:
        assumed.append(
            Note("NICs per node", str(out["nics_per_node"]), "preset (the log does not list NET/IB devices)")
        )
        guessed = True
    speed = by_name.get("nic_speed_mbps")
    topo_bw = by_name.get("nic_topo_gbytes")
    if speed is not None and int(speed.value) > 0:
        out["nic_bandwidth_bytes_per_s"] = int(speed.value) * 1e6 / 8
        inferred.append(Note("NIC speed", f"{int(speed.value) / 1000:g} Gb/s", _at(speed)))
        changes.append(f"{int(speed.value) / 1000:g} Gb/s NICs")
    elif topo_bw is not None and float(topo_bw.value) > 0:
        out["nic_bandwidth_bytes_per_s"] = float(topo_bw.value) * 1e9
        inferred.append(Note("NIC speed", f"{float(topo_bw.value):g} GB/s", _at(topo_bw)))
        changes.append(f"{float(topo_bw.value):g} GB/s NICs")
    else:
        rate = _rate(out, "nic_bandwidth_bytes_per_s")
        assumed.append(Note("NIC speed", f"{rate * 8 / 1e9:g} Gb/s", "preset (the log does not show NIC speeds)"))
        guessed = True
    return guessed


def check_tables() -> None:
    """Load every shipped table (a test and ``expect`` call this to fail early on a bad edit)."""
    from commlens.topology import load_topology

    systems_table()
    for g in systems_table().gpus:
        try:
            load_topology(g.preset)
        except TopologyError as e:
            raise ExpectError(f"systems.yaml: preset {g.preset!r}: {e}") from None
