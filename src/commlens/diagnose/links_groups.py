"""Slow hosts by adaptive group testing: rings over halves, recursively, then pair tests against good hosts.

All pairs (``links_analysis``) costs N-1 rounds a pass. Here one round is a set of disjoint *group tests* run at
once: a ring (each host sends the message to the next and receives one from the previous, in two or three
steps so that no host sends and receives at once) whose outcome is its slowest edge, one number per group as
an all-reduce over the group would give. A group that is slow is split in
halves, tested again in the next round, down to single hosts, which are tested against a host already shown
good. Disjoint groups share a round, so k slow hosts among n cost about log2(n) + 2 rounds (O(k log n) tests).

The planner (``GroupSearch``) is a pure state machine: ``next_round`` says which tests to run, ``observe`` takes
their raw records. The worker (``links_measure.measure_groups``) runs it on rank 0; ``diagnose_groups`` replays
the records of a run through it, and a measurement model can drive it at any scale (benchmarks/links_groups.py).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace

from commlens.diagnose.links_analysis import (
    MAD_TO_SIGMA,
    GroupTestOutcome,
    LinkDiagnosis,
    LinkFault,
    LinkRecord,
    Thresholds,
)
from commlens.errors import CommlensError

__all__ = ["GroupSearch", "GroupTest", "GroupsError", "TestOutcome", "diagnose_groups"]


class GroupsError(CommlensError, ValueError):
    """Records that do not follow the search's own plan, or a cluster too small to search."""


@dataclass(frozen=True)
class GroupTest:
    """One test: ``hosts`` in ring order; two hosts are a pair test (one direction, then the other).

    ``purpose``: ``screen`` (every host), ``half`` (half of a slow group), ``reference`` (``subject`` with a
    host shown good), ``cross`` (a link joining two halves that both tested normal). ``parent``: the id of
    the slow test this one refines.
    """

    hosts: tuple[int, ...]
    purpose: str
    parent: int | None = None
    subject: int | None = None

    def edges(self) -> list[tuple[int, int]]:
        """Directed (sender, receiver) pairs the test measures: each host to the next (a pair: both ways)."""
        h = self.hosts
        return [(h[i], h[(i + 1) % len(h)]) for i in range(len(h))]

    def phases(self) -> list[list[tuple[int, int]]]:
        """The edges in steps where no host both sends and receives: even edges, then odd ones, then (in an
        odd ring) the closing edge. A host that sends while it receives queues the TCP acks of what it
        receives behind its own data, which on a shaped link halves the rate it receives at."""
        m = len(self.hosts)
        steps: list[list[tuple[int, int]]] = [[], [], []]
        for i, edge in enumerate(self.edges()):
            steps[2 if m % 2 and i == m - 1 else i % 2].append(edge)
        return [s for s in steps if s]


@dataclass(frozen=True)
class TestOutcome:
    """A test's rate per pass (bytes/s of its slowest edge, each edge the median of its exchanges)."""

    test: GroupTest
    round: int
    rate_by_pass: tuple[float, ...]
    low_ratio: float  # the bar it was held to, x expected
    low_passes: int
    low: bool

    @property
    def rate_bytes_per_s(self) -> float:
        return statistics.median(self.rate_by_pass)


@dataclass
class _Family:
    """The children of one slow test: how many are still to be settled, whether a fault was named under them."""

    open: int = 0
    found: bool = False
    looked_between: bool = False
    children: list[int] = field(default_factory=list)


class GroupSearch:
    """Adaptive group testing over ``hosts`` hosts.

    Steps:

    1. Screen: one ring over every host in order. Each edge's rate is the size / the median of its
       exchanges; the expected rate is each host's best edge (in or out), median over hosts, median over
       passes, as ``links_analysis`` does with pairs: a slow host drags only its own best edge down, so a
       minority of slow hosts does not move it.
    2. A test is low when its rate (its slowest edge) is below a bar x expected in more than ``pass_share``
       of the passes. For a ring the bar is ``1 - min_drop``: a ring only sends the search on, and a ring
       wrongly low costs a few tests, while one wrongly normal hides a host. For a pair, whose verdict is
       final, it is ``links_analysis``' bar, ``1 - max(min_drop, noise_k x noise)``, the noise taken from the
       exchanges of the pair tests so far (every host sending at once in a ring is noisier than a pair).
       A test that is not low clears its hosts: they become references.
    3. A low group of 3 or more hosts is split into two halves (contiguous in its ring order), each tested
       in the next round: a ring, a pair test for two hosts, or a reference test for one host.
    4. A low pair is resolved by testing each of its hosts with a reference (a host cleared in step 2).
    5. A reference test that is low names its subject a slow host: slow with its group and with a good host.
    6. When every test under a low test is done and none named a fault (its children were normal, or
       low only by chance), the slowness lay between its children: a low pair whose two hosts are normal
       with references is a slow link; a low ring's cross edges (the two joining its halves) are tested as
       pairs, and one that is low is a slow link.
    7. A test waits for a free reference; when none exists (no host cleared), its subject is unresolved.

    Disjoint tests share a round; a host takes part in one test per round.
    """

    def __init__(self, hosts: int, thresholds: Thresholds = Thresholds()):
        if hosts < 4:
            raise GroupsError(f"group testing needs at least 4 hosts, got {hosts} (use the pairs strategy)")
        self.hosts = hosts
        self.thresholds = thresholds
        self.tests: list[GroupTest] = []
        self.outcomes: dict[int, TestOutcome] = {}
        self.rounds: list[list[int]] = []
        self.pending: list[GroupTest] = [GroupTest(tuple(range(hosts)), "screen")]
        self.good: set[int] = set()
        self.families: dict[int, _Family] = defaultdict(_Family)
        self.slow_hosts: dict[int, int] = {}  # host -> its reference test
        self.slow_links: dict[tuple[int, int], int] = {}  # (a, b) -> the low pair test
        self.unresolved: set[int] = set()
        self.passes = 0
        self.size_bytes = 0
        self.expected_bytes_per_s = 0.0
        self.noise_rel = 0.0  # of the screen's exchanges, until pair tests have run; then of theirs
        self.ring_low_ratio = 1 - thresholds.min_drop
        self.low_ratio = self.ring_low_ratio  # the pairs' bar
        self.pair_spreads: list[float] = []
        self.edge_rates: dict[tuple[int, int], list[float]] = defaultdict(list)

    # -- planning -------------------------------------------------------------------------------------

    def next_round(self) -> list[int] | None:
        """Ids of the tests to run now (disjoint hosts), or None when the search is over."""
        busy: set[int] = set()
        chosen: list[GroupTest] = []
        waiting: list[GroupTest] = []
        for request in self.pending:
            test = request
            if request.purpose == "reference":
                assert request.subject is not None
                free = (g for g in sorted(self.good) if g not in busy and g != request.subject)
                ref = next(free, None)
                if ref is None or request.subject in busy:
                    waiting.append(request)
                    continue
                test = replace(request, hosts=(request.subject, ref))
            if busy.intersection(test.hosts):
                waiting.append(request)
                continue
            busy.update(test.hosts)
            chosen.append(test)
        self.pending = waiting
        if not chosen:
            # reference tests with no host shown good to compare with: the search ends without them
            self.unresolved.update(r.subject for r in waiting if r.subject is not None)
            self.pending = []
            return None
        ids = list(range(len(self.tests), len(self.tests) + len(chosen)))
        self.tests.extend(chosen)
        self.rounds.append(ids)
        return ids

    def _request(self, test: GroupTest) -> None:
        self.pending.append(test)
        if test.parent is not None:
            self.families[test.parent].open += 1

    # -- observing ------------------------------------------------------------------------------------

    def observe(self, records: list[LinkRecord]) -> None:
        """Take the raw records of the round just planned (every rank's, every pass) and plan the next."""
        ids = self.rounds[-1]
        round_no = len(self.rounds) - 1
        got = {r["test"] for r in records}
        if got != set(ids) or any(r["round"] != round_no for r in records):
            raise GroupsError(f"round {round_no}: records of tests {sorted(got)}, the plan has tests {ids}")
        times: dict[tuple[int, int, int, int], list[float]] = defaultdict(list)  # (test, pass, a, b)
        spreads: list[float] = []
        for r in records:
            times[(r["test"], r["pass"], r["rank"], r["peer"])].extend(r["times_s"])
            self.size_bytes = r["size_bytes"]
            self.passes = max(self.passes, r["pass"] + 1)
            if len(r["times_s"]) > 1:
                med = statistics.median(r["times_s"])
                spread = MAD_TO_SIGMA * statistics.median([abs(x - med) for x in r["times_s"]]) / med
                (self.pair_spreads if len(self.tests[r["test"]].hosts) == 2 else spreads).append(spread)
        rates: dict[tuple[int, int], dict[tuple[int, int], float]] = defaultdict(dict)  # (test, pass) -> edge -> bw
        for (tid, p, a, b), ts in times.items():
            rates[(tid, p)][(a, b)] = self.size_bytes / statistics.median(ts)
            self.edge_rates[(a, b)].append(rates[(tid, p)][(a, b)])
        for tid in ids:
            for p in range(self.passes):
                measured = set(rates.get((tid, p), {}))
                if measured != set(self.tests[tid].edges()):
                    raise GroupsError(f"test {tid} pass {p}: records of edges {sorted(measured)}, not its ring")
        if round_no == 0:
            per_pass = [_expected(rates[(ids[0], p)], self.hosts) for p in range(self.passes)]
            self.expected_bytes_per_s = statistics.median(per_pass)
            self.noise_rel = statistics.median(spreads) if spreads else 0.0
        t = self.thresholds
        if self.pair_spreads:
            self.noise_rel = statistics.median(self.pair_spreads)
            self.low_ratio = 1 - max(t.min_drop, t.noise_k * self.noise_rel)
        for tid in ids:
            ratio = self.low_ratio if len(self.tests[tid].hosts) == 2 else self.ring_low_ratio
            by_pass = tuple(min(rates[(tid, p)].values()) for p in range(self.passes))
            n_low = sum(rate < ratio * self.expected_bytes_per_s for rate in by_pass)
            outcome = TestOutcome(self.tests[tid], round_no, by_pass, ratio, n_low, n_low > t.pass_share * self.passes)
            self.outcomes[tid] = outcome
            self._decide(tid, outcome)

    def _decide(self, tid: int, o: TestOutcome) -> None:
        t = o.test
        if t.parent is not None:
            self.families[t.parent].children.append(tid)
        if t.purpose == "reference":
            assert t.subject is not None
            if o.low:
                self.slow_hosts[t.subject] = tid
            else:
                self.good.add(t.subject)
            self._settled(tid, found=o.low)
        elif t.purpose == "cross":
            if o.low:
                a, b = sorted(t.hosts)
                self.slow_links[(a, b)] = tid
            self._settled(tid, found=o.low)
        elif not o.low:
            self.good.update(t.hosts)
            self._settled(tid, found=False)
        elif len(t.hosts) == 2:
            for h in t.hosts:
                self._request(GroupTest((h,), "reference", parent=tid, subject=h))
        else:
            mid = len(t.hosts) // 2
            for half in (t.hosts[:mid], t.hosts[mid:]):
                if len(half) == 1:
                    self._request(GroupTest(half, "reference", parent=tid, subject=half[0]))
                else:
                    self._request(GroupTest(half, "half", parent=tid))

    def _settled(self, tid: int, found: bool) -> None:
        """Test ``tid`` and everything under it are done (``found``: a fault was named there); tell its parent."""
        parent = self.tests[tid].parent
        if parent is None:
            return
        fam = self.families[parent]
        fam.open -= 1
        fam.found |= found
        if not fam.open:
            self._explain(parent)

    def _explain(self, tid: int) -> None:
        """Every child of the low test ``tid`` is done. When none named a fault, its slowness lay between
        them (step 6): look there once, then settle it."""
        fam = self.families[tid]
        t = self.tests[tid]
        if not fam.found and not fam.looked_between:
            fam.looked_between = True
            if len(t.hosts) == 2:
                if len(fam.children) == 2 and all(self.tests[c].subject in self.good for c in fam.children):
                    a, b = sorted(t.hosts)
                    self.slow_links[(a, b)] = tid
                    fam.found = True
            else:
                mid = len(t.hosts) // 2
                for a, b in ((t.hosts[mid - 1], t.hosts[mid]), (t.hosts[-1], t.hosts[0])):
                    self._request(GroupTest((a, b), "cross", parent=tid))
                return
        self._settled(tid, fam.found)

    # -- the verdict ----------------------------------------------------------------------------------

    @property
    def measurement_rounds(self) -> int:
        """Rounds run, each repeated every pass: what all-pairs' passes x (N-1) compares with."""
        return len(self.rounds) * self.passes

    def _ancestry(self, tid: int) -> list[int]:
        chain = []
        cur: int | None = tid
        while cur is not None:
            chain.append(cur)
            cur = self.tests[cur].parent
        return chain

    def _cleared_by(self, tid: int) -> list[TestOutcome]:
        """The normal tests that show a slow link's two hosts good without each other: a low pair's reference
        tests, or a cross pair's sibling halves."""
        t = self.tests[tid]
        if t.purpose == "cross":
            assert t.parent is not None
            return [self.outcomes[c] for c in self.families[t.parent].children if self.tests[c].purpose != "cross"]
        return [self.outcomes[c] for c in self.families[tid].children]

    def diagnosis(self) -> LinkDiagnosis:
        """The verdict in ``diagnose links``' format; the matrix holds the edges measured (median), else None."""
        n, expected, passes = self.hosts, self.expected_bytes_per_s, self.passes
        faults: list[LinkFault] = []
        for h, tid in sorted(self.slow_hosts.items()):
            ref = self.outcomes[tid]
            chain = [self.outcomes[c] for c in self._ancestry(tid)]
            agree = sum(c.low_passes for c in chain) / (len(chain) * passes)
            measured = ref.rate_bytes_per_s
            groups = " > ".join(f"{_name(c.test)} {c.rate_bytes_per_s / expected:.2f}x" for c in reversed(chain[1:]))
            faults.append(
                LinkFault.found(
                    (h,),
                    measured,
                    expected,
                    agree,
                    f"low in every test that held it ({groups}); with good host {ref.test.hosts[1]}: ",
                    f", low in {ref.low_passes}/{passes} passes",
                )
            )
        for (a, b), tid in sorted(self.slow_links.items()):
            o = self.outcomes[tid]
            clear = self._cleared_by(tid)
            ok = sum(passes - c.low_passes for c in clear) / (len(clear) * passes) if clear else 1.0
            measured = o.rate_bytes_per_s
            faults.append(
                LinkFault.found(
                    (a, b),
                    measured,
                    expected,
                    o.low_passes / passes * ok,
                    f"pair {a}-{b} low in {o.low_passes}/{passes} passes: ",
                    f"; hosts {a} and {b} are normal without each other ({', '.join(_name(c.test) for c in clear)}: "
                    f"{ok:.0%} of passes at or above the bar)",
                )
            )
        bw: list[list[float | None]] = [[None] * n for _ in range(n)]
        for (a, b), rs in self.edge_rates.items():
            bw[a][b] = statistics.median(rs)
        return LinkDiagnosis(
            hosts=n,
            size_bytes=self.size_bytes,
            passes=passes,
            bandwidth_bytes_per_s=bw,
            latency_s=[[None] * n for _ in range(n)],
            expected_bytes_per_s=expected,
            noise_rel=self.noise_rel,
            low_ratio=self.low_ratio,
            faults=faults,
            strategy="groups",
            rounds=self.measurement_rounds,
            group_tests=[
                GroupTestOutcome(
                    round=o.round,
                    purpose=o.test.purpose,
                    hosts=list(o.test.hosts),
                    bytes_per_s=o.rate_bytes_per_s,
                    ratio=o.rate_bytes_per_s / expected if expected else math.nan,
                    low_below=o.low_ratio,
                    low_passes=o.low_passes,
                    low=o.low,
                )
                for _, o in sorted(self.outcomes.items())
            ],
            unresolved=sorted(self.unresolved),
        )


def _expected(edge_rates: dict[tuple[int, int], float], hosts: int) -> float:
    """Median over hosts of each host's best edge (sending or receiving)."""
    best = [0.0] * hosts
    for (a, b), rate in edge_rates.items():
        best[a] = max(best[a], rate)
        best[b] = max(best[b], rate)
    return statistics.median(best)


def _name(t: GroupTest) -> str:
    h = t.hosts
    if len(h) == 2:
        return f"pair {h[0]}-{h[1]}"
    runs = f"{h[0]}..{h[-1]}" if list(h) == list(range(h[0], h[-1] + 1)) else ",".join(map(str, h))
    return f"ring {runs}"


def describe(test: GroupTestOutcome) -> str:
    """One line of a group test of the JSON for the report."""
    return _name(GroupTest(tuple(test["hosts"]), test["purpose"]))


def diagnose_groups(records: list[LinkRecord], hosts: int, thresholds: Thresholds = Thresholds()) -> LinkDiagnosis:
    """Replay a run's records through the search (the same decisions the worker took) and give its verdict."""
    search = GroupSearch(hosts, thresholds)
    by_round: dict[int, list[LinkRecord]] = defaultdict(list)
    for r in records:
        by_round[r["round"]].append(r)
    while search.next_round() is not None:
        search.observe(by_round.pop(len(search.rounds) - 1, []))
    if by_round:
        raise GroupsError(f"records of rounds {sorted(by_round)} that the search did not plan")
    return search.diagnosis()
