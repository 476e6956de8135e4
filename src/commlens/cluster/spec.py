"""What an emulated cluster is: hosts, link rate, faults; parsed and checked at the edge."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field

from commlens.errors import CommlensError

__all__ = [
    "ClusterError",
    "ClusterSpec",
    "ClusterSpecError",
    "NotRootError",
    "SlowHost",
    "SlowLink",
    "StarvedHost",
    "check_name",
    "names_for",
    "parse_slow_host",
    "parse_slow_link",
    "parse_starved_host",
]

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,23}$")
MAX_HOSTS = 200


class ClusterError(CommlensError, RuntimeError):
    """A cluster that cannot be built, found or changed; the message says why."""


class NotRootError(ClusterError):
    """Namespaces, veth pairs and qdiscs need root."""


class ClusterSpecError(ClusterError, ValueError):
    """A cluster name, spec field or fault option that is not valid; the message names it."""


def check_name(name: str) -> str:
    """``name`` when it is a cluster name (lower-case letters, digits and '-', at most 24 characters), so that
    the state file and kernel objects built from it stay where they belong (``../x`` is not a name)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ClusterSpecError(f"name {name!r}: lower-case letters, digits and '-', at most 24 characters")
    return name


@dataclass(frozen=True)
class SlowHost:
    """Host ``host``'s link (both directions) runs at ``fraction`` of the link rate."""

    host: int
    fraction: float


@dataclass(frozen=True)
class SlowLink:
    """Traffic between hosts ``a`` and ``b`` (both directions) runs at ``fraction`` of the link rate."""

    a: int
    b: int
    fraction: float


@dataclass(frozen=True)
class StarvedHost:
    """Ranks on ``host`` get ``cpu_fraction`` of one CPU in total (a cgroup CPU quota)."""

    host: int
    cpu_fraction: float


@dataclass(frozen=True)
class ClusterSpec:
    """An emulated cluster; validated at construction (``ClusterSpecError``, a ``ValueError``, naming the field)."""

    name: str
    hosts: int
    link_bytes_per_s: float
    ranks_per_host: int = 1
    slow_hosts: tuple[SlowHost, ...] = ()
    slow_links: tuple[SlowLink, ...] = ()
    starved_hosts: tuple[StarvedHost, ...] = ()
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name)
        if isinstance(self.hosts, bool) or not 2 <= self.hosts <= MAX_HOSTS:
            raise ClusterSpecError(f"hosts must be between 2 and {MAX_HOSTS}, got {self.hosts}")
        if isinstance(self.link_bytes_per_s, bool) or not (
            math.isfinite(self.link_bytes_per_s) and self.link_bytes_per_s > 0
        ):
            raise ClusterSpecError(
                f"link rate must be a finite number > 0, got {self.link_bytes_per_s * 8 / 1e9:g} Gb/s"
            )
        if self.ranks_per_host < 1:
            raise ClusterSpecError("ranks_per_host must be >= 1")
        for f in self.slow_hosts:
            self._check_host(f.host, "slow host")
            self._check_fraction(f.fraction, "slow host")
        for link in self.slow_links:
            self._check_host(link.a, "slow link")
            self._check_host(link.b, "slow link")
            if link.a == link.b:
                raise ClusterSpecError(f"slow link {link.a}-{link.b} joins a host to itself")
            self._check_fraction(link.fraction, "slow link")
        for starved in self.starved_hosts:
            self._check_host(starved.host, "cpu-starved host")
            if not 0.01 <= starved.cpu_fraction <= 64:
                raise ClusterSpecError(
                    f"cpu-starved host {starved.host}: CPU fraction must be in [0.01, 64], got {starved.cpu_fraction}"
                )

    def _check_host(self, host: int, what: str) -> None:
        if not 0 <= host < self.hosts:
            raise ClusterSpecError(f"{what}: host {host} does not exist (hosts 0..{self.hosts - 1})")

    @staticmethod
    def _check_fraction(fraction: float, what: str) -> None:
        if not 0 < fraction <= 1:  # false for NaN too
            raise ClusterSpecError(f"{what}: fraction must be in (0, 1], got {fraction}")

    def host_rate(self, host: int) -> float:
        """Bytes/s of ``host``'s link in each direction."""
        fractions = [f.fraction for f in self.slow_hosts if f.host == host]
        return self.link_bytes_per_s * min(fractions, default=1.0)

    def link_rate(self, a: int, b: int) -> float | None:
        """Bytes/s cap on the pair ``a``-``b`` when a slow-link fault applies to it, else None."""
        fractions = [f.fraction for f in self.slow_links if {f.a, f.b} == {a, b}]
        return self.link_bytes_per_s * min(fractions) if fractions else None


def _split(text: str, sep: str, what: str) -> tuple[str, str]:
    if sep not in text:
        raise ClusterSpecError(
            f"{what} {text!r}: expected the form {'A-B' if what == 'slow link' else 'H'}{sep}FRACTION"
        )
    left, right = text.rsplit(sep, 1)
    return left, right


def parse_slow_host(text: str) -> SlowHost:
    """``H:FRACTION``, e.g. ``2:0.3``."""
    host, frac = _split(text, ":", "slow host")
    try:
        return SlowHost(int(host), float(frac))
    except ValueError:
        raise ClusterSpecError(f"slow host {text!r}: expected H:FRACTION, e.g. 2:0.3") from None


def parse_slow_link(text: str) -> SlowLink:
    """``A-B:FRACTION``, e.g. ``0-3:0.5``."""
    pair, frac = _split(text, ":", "slow link")
    try:
        a, b = pair.split("-")
        return SlowLink(int(a), int(b), float(frac))
    except ValueError:
        raise ClusterSpecError(f"slow link {text!r}: expected A-B:FRACTION, e.g. 0-3:0.5") from None


def parse_starved_host(text: str) -> StarvedHost:
    """``H:CPUS``, e.g. ``1:0.2`` (a fifth of one CPU for all of host 1's ranks)."""
    host, frac = _split(text, ":", "cpu-starved host")
    try:
        return StarvedHost(int(host), float(frac))
    except ValueError:
        raise ClusterSpecError(f"cpu-starved host {text!r}: expected H:CPUS, e.g. 1:0.2") from None


@dataclass(frozen=True)
class Names:
    """Kernel object names of one cluster (interface names are limited to 15 characters)."""

    name: str

    @property
    def tag(self) -> str:
        return hashlib.sha1(self.name.encode()).hexdigest()[:5]

    @property
    def bridge(self) -> str:
        return f"cl{self.tag}br"

    def netns(self, host: int) -> str:
        return f"cl-{self.name}-h{host}"

    def veth_root(self, host: int) -> str:
        return f"cl{self.tag}h{host}"

    def cgroup(self, host: int) -> str:
        return f"commlens-{self.name}-h{host}"


def names_for(name: str) -> Names:
    return Names(name)
