"""What a run's log says about the system it ran on: one :class:`Fact` per thing read, with the line it came from.

The readers of :mod:`commlens.ingest` keep the table and the rank list; NCCL's own ``NCCL INFO`` lines
(network, GPU Direct RDMA, channels, NVLS, transports) are read here, from the text the run came from,
and kept with the run (``system.extra["expect_facts"]``) so that ``show`` can judge it later without the file.

Steps of :func:`log_facts`:

1. Scan at most :data:`MAX_LINES` lines; only lines mentioning ``NCCL``/``RCCL`` or an nccl-tests device
   line are looked at, each cut to :data:`MAX_LINE_CHARS` characters.
2. Each pattern of :data:`_PATTERNS` that matches gives a fact; a fact seen again keeps its first line, except
   for counts (channels, NICs) where the largest value wins.
3. GPU Direct RDMA is read from the connection lines: ``via NET/IB/0/GDRDMA`` says on, ``via NET/IB/0`` alone
   says off (NCCL prints the suffix only when it uses GDR).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from commlens.results.jsonvalue import JsonObject

__all__ = ["MAX_LINES", "Fact", "facts_from_dicts", "facts_to_dicts", "log_facts"]

MAX_LINES = 2_000_000
MAX_LINE_CHARS = 400
_SHOWN_CHARS = 160


@dataclass(frozen=True)
class Fact:
    """One thing the log says: ``name`` (``net_transport``), its value, the 1-based line and its text."""

    name: str
    value: Any
    line: int
    text: str

    def as_dict(self) -> JsonObject:
        return {"name": self.name, "value": self.value, "line": self.line, "text": self.text}


def facts_to_dicts(facts: Iterable[Fact]) -> list[JsonObject]:
    return [f.as_dict() for f in facts]


def facts_from_dicts(items: Any) -> list[Fact]:
    """Facts kept with a stored run; anything malformed is left out (a stored run is data from outside)."""
    out: list[Fact] = []
    if not isinstance(items, list):
        return out
    for item in items[:200]:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("line"), int):
            value = item.get("value")
            if isinstance(value, (str, int, float, bool)) or value is None:
                out.append(Fact(item["name"], value, item["line"], str(item.get("text", ""))[:_SHOWN_CHARS]))
    return out


_NCCL_VERSION = re.compile(r"\b(?:NCCL|RCCL) version\s*:?\s*(\d+\.\d+\.\d+)")
_DEVICE_LINE = re.compile(r"#\s+Rank\s+\d+\s.*?device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_NET_IB = re.compile(r"NET/IB ?: Using (.+?)(?:;|$)")
_NET_IB_NONE = re.compile(r"NET/IB ?: No device found")
_NET_SOCKET = re.compile(r"NET/Socket ?: Using (.+?)(?:;|$)")
_NET_OFI = re.compile(r"NET/OFI Selected [Pp]rovider is (\w+)")
_SPEED = re.compile(r"\bspeed=(\d+)")
_NET_BW = re.compile(r"\bNET\[(\d+(?:\.\d+)?)\]")
_CHANNEL = re.compile(r"NCCL INFO Channel \d+/(\d+) ?:")
_COLL_CHANNELS = re.compile(r"NCCL INFO (\d+) coll channels")
_NVLS_CHANNELS = re.compile(r"(\d+) nvls channels")
_VIA = re.compile(
    r"\bvia (NET/[\w. ]+?/\d+(?:\(\d+\))?(?:/GDRDMA)?(?:/Shared)?|NET/[\w.]+|P2P/[\w/]+|SHM(?:/[\w/]+)?|COLLNET)(?=\s|$|,)"
)
_GDR_DISABLED = re.compile(r"GPU Direct RDMA Disabled|disabling GDR|GDR(?:DMA)? disabled", re.IGNORECASE)
_GDR_ENABLED = re.compile(r"GPU Direct RDMA Enabled")
_NVLS_SUPPORT = re.compile(r"NVLS multicast support is (not )?available")
_ENV_SET = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (\S+)")
_TOPO_PATTERN = re.compile(r"Pattern \d+, crossNic \d+, nChannels (\d+), bw (\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)")

_WORTH_A_LOOK = ("NCCL", "RCCL", "Rank")


def _transport(text: str) -> str:
    t = text.lower()
    if "socket" in t:
        return "Socket"
    if "libfabric" in t or "ofi" in t or "efa" in t:
        return "OFI"
    if "ib" in t:
        return "IB"
    return text.strip()[:40]


# (pattern, fact, its value from the match): facts a line gives by one pattern, the first line's kept
_FIRST: tuple[tuple[re.Pattern[str], str, Callable[[re.Match[str]], object]], ...] = (
    (_NCCL_VERSION, "nccl_version", lambda m: m.group(1)),
    (_USING_NETWORK, "net_transport", lambda m: _transport(m.group(1))),
    (_NET_IB_NONE, "ib_absent", lambda m: True),
    (_NET_SOCKET, "socket_devices", lambda m: m.group(1).strip()[:80]),
    (_NVLS_SUPPORT, "nvls_available", lambda m: m.group(1) is None),
)
# likewise, the largest value kept
_LARGEST: tuple[tuple[re.Pattern[str], str, Callable[[re.Match[str]], float]], ...] = (
    (_NET_BW, "nic_topo_gbytes", lambda m: float(m.group(1))),
    (_CHANNEL, "channels", lambda m: int(m.group(1))),
    (_TOPO_PATTERN, "graph_bw_gbytes", lambda m: float(m.group(2))),
)


def log_facts(text: str) -> list[Fact]:
    """The facts of one log (see the module's steps); empty for a text without NCCL lines."""
    first: dict[str, Fact] = {}
    largest: dict[str, Fact] = {}
    via: dict[str, Fact] = {}
    gdr_on: Fact | None = None
    gdr_off: Fact | None = None
    plain_net: Fact | None = None  # the first NET connection line without GDRDMA

    def keep(name: str, value: Any, lineno: int, line: str) -> None:
        if name not in first:
            first[name] = Fact(name, value, lineno, line.strip()[:_SHOWN_CHARS])

    def most(name: str, value: int | float, lineno: int, line: str) -> None:
        old = largest.get(name)
        if old is None or value > old.value:
            largest[name] = Fact(name, value, lineno, line.strip()[:_SHOWN_CHARS])

    for lineno, raw in enumerate(text.splitlines()[:MAX_LINES], 1):
        if not any(w in raw for w in _WORTH_A_LOOK):
            continue
        line = raw[:MAX_LINE_CHARS]
        if m := _DEVICE_LINE.search(line):
            keep("gpu", m.group(1), lineno, line)
            continue
        for pattern, name, value in _FIRST:
            if m := pattern.search(line):
                keep(name, value(m), lineno, line)
        for pattern, name, number in _LARGEST:
            if m := pattern.search(line):
                most(name, number(m), lineno, line)
        if m := _NET_IB.search(line):
            devices = re.findall(r"\[\d+\]\s*([\w.\-]+)(?::\d+)?(?:/(IB|RoCE))?", m.group(1))
            names = {d[0] for d in devices}
            if names:
                most("nics", len(names), lineno, line)
                kinds = {d[1] for d in devices if d[1]}
                if kinds:
                    keep("nic_link", "/".join(sorted(kinds)), lineno, line)
        if m := _NET_OFI.search(line):
            keep("ofi_provider", m.group(1), lineno, line)
            keep("net_transport", "OFI", lineno, line)
        if "NET/IB" in line and (m := _SPEED.search(line)):
            most("nic_speed_mbps", int(m.group(1)), lineno, line)
        if m := _COLL_CHANNELS.search(line):
            most("channels", int(m.group(1)), lineno, line)
            if n := _NVLS_CHANNELS.search(line):
                keep("nvls_channels", int(n.group(1)), lineno, line)
        if m := _ENV_SET.search(line):
            keep("env:" + m.group(1), m.group(2), lineno, line)
        if _GDR_DISABLED.search(line) and gdr_off is None:
            gdr_off = Fact("gdr", False, lineno, line.strip()[:_SHOWN_CHARS])
        if _GDR_ENABLED.search(line) and gdr_on is None:
            gdr_on = Fact("gdr", True, lineno, line.strip()[:_SHOWN_CHARS])
        for m in _VIA.finditer(line):
            path = m.group(1).strip()
            kind = (
                "net" if path.startswith("NET/") else ("p2p" if path.startswith("P2P") else path.split("/")[0].lower())
            )
            if kind == "net":
                if "/GDRDMA" in path:  # also NET/IB/1/GDRDMA/Shared
                    gdr_on = gdr_on or Fact("gdr", True, lineno, line.strip()[:_SHOWN_CHARS])
                elif "NET/Socket" not in path:
                    gdr_off = gdr_off or Fact("gdr", False, lineno, line.strip()[:_SHOWN_CHARS])
                    plain_net = plain_net or Fact("gdr_partial", True, lineno, line.strip()[:_SHOWN_CHARS])
                if "NET/Socket" in path:
                    keep("net_transport", "Socket", lineno, line)
            if kind not in via:
                via[kind] = Fact("via_" + kind, path, lineno, line.strip()[:_SHOWN_CHARS])
    facts = list(first.values()) + list(largest.values()) + list(via.values())
    # GDR is on if any connection used it (NCCL picks per NIC/GPU pair); off only when none did
    if gdr_on is not None:
        facts.append(gdr_on)
        if plain_net is not None:  # and some connections without it: a host or GPU-NIC pair that lacks GDR
            facts.append(plain_net)
    elif gdr_off is not None:
        facts.append(gdr_off)
    return sorted(facts, key=lambda f: (f.line, f.name))
