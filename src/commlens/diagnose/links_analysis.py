"""Locate slow hosts and slow links in an all-pairs bandwidth matrix by robust statistics.

A plain function over the raw records of ``links_measure.measure``; returns a ``LinkDiagnosis``.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import TypedDict

from commlens.diagnose import tournament
from commlens.results.jsonvalue import JsonObject

__all__ = ["FORMAT", "LinkDiagnosis", "LinkFault", "Thresholds", "diagnose_links"]

FORMAT = "commlens.links/1"
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Thresholds:
    """When a pair counts as low; every field checked at construction."""

    min_drop: float = 0.25  # a pair must be at least this fraction below expected to count as low
    noise_k: float = 5.0  # ... and at least this many noise sigmas below
    host_share: float = 0.75  # a host is slow when at least this share of its pairs is low (and >= 2 pairs)
    pass_share: float = 0.5  # a pair is low when low in more than this share of the passes

    def __post_init__(self) -> None:
        for name in ("min_drop", "host_share", "pass_share"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must be in (0, 1)")
        if self.noise_k < 0:
            raise ValueError("noise_k must be >= 0")


@dataclass(frozen=True)
class LinkFault:
    """One located fault: ``kind`` slow_host (one host) or slow_link (two hosts)."""

    kind: str
    hosts: tuple[int, ...]
    measured_bytes_per_s: float
    expected_bytes_per_s: float
    confidence: float
    evidence: str

    @classmethod
    def found(
        cls, hosts: tuple[int, ...], measured: float, expected: float, confidence: float, before: str, after: str = ""
    ) -> LinkFault:
        """A slow host (one in ``hosts``) or slow link (two): the evidence is ``before``, the measured rate
        against the expected one, then ``after``; the confidence is kept to 3 decimals."""
        versus = f"{measured / 1e6:.1f} MB/s vs {expected / 1e6:.1f} MB/s expected ({measured / expected:.2f}x)"
        kind = "slow_host" if len(hosts) == 1 else "slow_link"
        return cls(kind, hosts, measured, expected, round(confidence, 3), before + versus + after)


# One rank's timed sends in one test (``links_measure``): "pair" (to ``peer``, in a tournament round; both
# ranks of a pair report, one direction each), "ring" (to the next rank, all at once) or "group" (to the next
# host of test ``test``'s ring). "pass" is a Python keyword, hence the functional form.
LinkRecord = TypedDict(
    "LinkRecord",
    {
        "kind": str,
        "pass": int,
        "round": int,
        "rank": int,
        "peer": int,
        "size_bytes": int,
        "times_s": list[float],
        "latency_s": list[float],  # pair: ping-pong round trips
        "test": int,  # group: the test's id
        "hosts": list[int],  # group: the test's hosts in ring order
    },
    total=False,
)


class RingCheck(TypedDict):
    """The ring check's rate (each rank sending to the next at once) against the expected pair rate."""

    bytes_per_s: float
    expected_bytes_per_s: float
    ratio: float


class GroupTestOutcome(TypedDict):
    """One adaptive group test as the report shows it (``links_groups``)."""

    round: int
    purpose: str
    hosts: list[int]
    bytes_per_s: float
    ratio: float
    low_below: float
    low_passes: int
    low: bool


@dataclass(frozen=True)
class LinkDiagnosis:
    """The matrices (bytes/s and seconds, ``None`` on the diagonal), the expected rate, the faults."""

    hosts: int
    size_bytes: int
    passes: int
    bandwidth_bytes_per_s: list[list[float | None]]
    latency_s: list[list[float | None]]
    expected_bytes_per_s: float
    noise_rel: float
    low_ratio: float
    faults: list[LinkFault] = field(default_factory=list)
    ring: RingCheck | None = None
    strategy: str = "pairs"  # pairs: every pair in a tournament; groups: adaptive group tests (links_groups)
    rounds: int = 0  # measurement rounds run, passes included (a round: every host sends at most one message)
    group_tests: list[GroupTestOutcome] | None = None  # groups only
    unresolved: list[int] = field(default_factory=list)  # groups: hosts no good host could be compared with

    @property
    def healthy(self) -> bool:
        return not self.faults

    def to_dict(self) -> JsonObject:
        d = asdict(self)
        d["format"] = FORMAT
        d["healthy"] = self.healthy
        d["faults"] = [{**asdict(f), "hosts": list(f.hosts)} for f in self.faults]
        return d


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def _mad(xs: list[float]) -> float:
    m = _median(xs)
    return _median([abs(x - m) for x in xs])


def diagnose_links(records: list[LinkRecord], hosts: int, thresholds: Thresholds = Thresholds()) -> LinkDiagnosis:
    """Find slow hosts and slow links in the records of ``links_measure.measure``.

    Steps:

    1. Per pass and pair (a, b): the pair's bandwidth is the size divided by the median of its timed
       one-way transfers, both directions together (the matrix shown is per direction, row = sender).
    2. Expected rate per pass: each host's *best* pair, then the median over hosts. A shaped link's rate
       is a ceiling and noise only lowers throughput, so a host's best pair estimates its capacity; the
       median over hosts ignores a minority of slow hosts (a slow host drags only its own best pair down).
    3. Noise: for each pair and pass, 1.4826 x MAD / median of its exchanges; the noise is the median of
       these over the matrix (robust to the faults themselves, which lower a pair's level, not its spread).
    4. A pair is low in a pass when its bandwidth is below ``expected x (1 - max(min_drop, noise_k x noise))``.
    5. A pair is consistently low when low in more than ``pass_share`` of the passes.
    6. A host is slow when at least ``host_share`` of its pairs (and at least 2) are consistently low.
    7. A consistently low pair between two hosts that are not slow is a slow link. Low pairs that
       touch a slow host are explained by it and not reported again.
    8. Confidence = the share of the (pair, pass) measurements that agree with the verdict: for a slow
       host its pairs below the bar; for a slow link its passes below the bar times its two hosts' other
       pairs at or above it.

    The ring check (each rank sends to the next one, all at once) is reported with its rate against the
    expected rate; it confirms a fault on the ring path but is not itself a verdict.
    """
    t = thresholds
    m = _measure(records, hosts)
    passes, size = m.passes, m.size_bytes
    expected_by_pass = {}
    for p, bws in m.by_pass.items():
        best = [max(bw for (a, b), bw in bws.items() if h in (a, b)) for h in range(hosts)]
        expected_by_pass[p] = _median(best)
    expected = _median(list(expected_by_pass.values()))
    noise = _median(m.rel_spreads) if m.rel_spreads else 0.0
    low_ratio = 1 - max(t.min_drop, t.noise_k * noise)

    low_passes = {
        key: sum(m.by_pass[p][key] < low_ratio * expected_by_pass[p] for p in range(passes)) for key in m.pair_bw
    }
    faults = _faults(m, hosts, t, expected, low_ratio, low_passes)

    bw_matrix: list[list[float | None]] = [[None] * hosts for _ in range(hosts)]
    lat_matrix: list[list[float | None]] = [[None] * hosts for _ in range(hosts)]
    for (sender, receiver), times in m.directed.items():
        bw_matrix[sender][receiver] = size / _median(times)
    for (a, b), lats in m.pair_lat.items():
        lat_matrix[a][b] = lat_matrix[b][a] = _median(lats)
    ring = None
    ring_recs = [r for r in records if r["kind"] == "ring"]
    if ring_recs:
        n = len(ring_recs[0]["times_s"])
        slowest = [max(r["times_s"][i] for r in ring_recs) for i in range(n)]
        ring_bw = size / _median(slowest)
        ring = RingCheck(bytes_per_s=ring_bw, expected_bytes_per_s=expected, ratio=ring_bw / expected)
    return LinkDiagnosis(
        hosts=hosts,
        size_bytes=size,
        passes=passes,
        bandwidth_bytes_per_s=bw_matrix,
        latency_s=lat_matrix,
        expected_bytes_per_s=expected,
        noise_rel=noise,
        low_ratio=low_ratio,
        faults=faults,
        ring=ring,
        rounds=passes * len(tournament.rounds(hosts)) + (1 if ring_recs else 0),
    )


@dataclass
class _Measured:
    """Step 1's rates and the timings behind them."""

    passes: int
    size_bytes: int
    pair_bw: dict[tuple[int, int], list[float]]  # per pass, in pass order
    pair_lat: dict[tuple[int, int], list[float]]
    by_pass: dict[int, dict[tuple[int, int], float]]
    directed: dict[tuple[int, int], list[float]]  # (sender, receiver) -> times
    rel_spreads: list[float]


def _measure(records: list[LinkRecord], hosts: int) -> _Measured:
    """Step 1 (and the spreads step 3 takes the median of); ValueError when a pair lacks a pass."""
    pair_bw: dict[tuple[int, int], list[float]] = defaultdict(list)
    pair_lat: dict[tuple[int, int], list[float]] = defaultdict(list)
    rel_spreads: list[float] = []
    passes = 1 + max((r["pass"] for r in records if r["kind"] == "pair"), default=0)
    size = next(r["size_bytes"] for r in records)
    by_pass: dict[int, dict[tuple[int, int], float]] = defaultdict(dict)
    pair_times: dict[tuple[int, int, int], list[float]] = defaultdict(list)  # (pass, a, b) -> both directions
    directed: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in (r for r in records if r["kind"] == "pair"):
        a, b = sorted((r["rank"], r["peer"]))
        pair_times[(r["pass"], a, b)].extend(r["times_s"])
        directed[(r["rank"], r["peer"])].extend(r["times_s"])
        if r["rank"] == a:
            pair_lat[(a, b)].extend(r["latency_s"])
        if len(r["times_s"]) > 1:
            rel_spreads.append(MAD_TO_SIGMA * _mad(r["times_s"]) / _median(r["times_s"]))
    for (p, a, b), times in sorted(pair_times.items()):
        bw = size / _median(times)
        by_pass[p][(a, b)] = bw
        pair_bw[(a, b)].append(bw)
    missing = [(a, b) for a in range(hosts) for b in range(a + 1, hosts) if len(pair_bw.get((a, b), [])) != passes]
    if missing:
        raise ValueError(f"records lack pairs {missing[:5]}{'...' if len(missing) > 5 else ''}")
    return _Measured(passes, size, pair_bw, pair_lat, by_pass, directed, rel_spreads)


def _faults(
    m: _Measured,
    hosts: int,
    t: Thresholds,
    expected: float,
    low_ratio: float,
    low_passes: dict[tuple[int, int], int],
) -> list[LinkFault]:
    """Steps 5 to 8: the slow hosts, then the slow links between hosts that are not slow."""
    passes, pair_bw = m.passes, m.pair_bw
    low = {key for key, n in low_passes.items() if n > t.pass_share * passes}

    def pairs_of(h: int) -> list[tuple[int, int]]:
        return [k for k in pair_bw if h in k]

    faults: list[LinkFault] = []
    slow_hosts = set()
    need = max(2, math.ceil(t.host_share * (hosts - 1)))
    for h in range(hosts):
        mine = pairs_of(h)
        n_low = sum(k in low for k in mine)
        if n_low >= need and hosts > 2:
            slow_hosts.add(h)
            measured = _median([_median(pair_bw[k]) for k in mine])
            agree = sum(low_passes[k] for k in mine) / (len(mine) * passes)
            faults.append(
                LinkFault.found(
                    (h,),
                    measured,
                    expected,
                    agree,
                    f"{n_low}/{len(mine)} pairs of host {h} low (below {low_ratio:.2f}x expected) in most of {passes} "
                    "passes: median ",
                )
            )
    for key in sorted(low):
        a, b = key
        if a in slow_hosts or b in slow_hosts:
            continue
        measured = _median(pair_bw[key])
        others = [k for k in pairs_of(a) + pairs_of(b) if k != key]
        others_ok = (sum(passes - low_passes[k] for k in others) / (len(others) * passes)) if others else 1.0
        confidence = low_passes[key] / passes * others_ok
        faults.append(
            LinkFault.found(
                key,
                measured,
                expected,
                confidence,
                f"pair {a}-{b} low in {low_passes[key]}/{passes} passes: ",
                f"; hosts {a} and {b} are normal with their other peers ({others_ok:.0%} of those measurements at or "
                "above the bar)",
            )
        )
    return faults
