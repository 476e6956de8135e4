"""The fluid engine: max-min fair rates by progressive filling, advanced from event to event.

The unit of traffic is a *bundle*: flows that move the same bytes each and advance at one rate (the flows of one
step of a collective, every one waiting for the slowest: the step's synchronisation), or a single flow. A bundle
loads each link with the number of its flows crossing it (fractions when sprayed). Rates are max-min fair per
flow: progressive filling raises every unfrozen bundle's per-flow rate together until a link fills, freezes the
bundles crossing it, and goes on until every bundle is frozen (Bertsekas and Gallager, Data Networks, 6.5.2).
Each round is a sparse matrix-vector product over the active bundles' links (numpy ``bincount``), so a
recomputation costs O(links crossed x distinct bottleneck levels).

Work is a DAG of *tasks*: a task starts when its dependencies are done, waits its latency, then moves its bundles;
it ends when they are all done and at least ``min_s`` after they began (a reduction that hides under the
transfers), plus ``post_s`` (one that follows them). Rates are recomputed whenever a bundle starts or finishes.
Finishes closer together than ``FINISH_TOLERANCE`` (relative) are taken as one event, so thousands of flows
limited alike finish in one step. Everything is deterministic: no randomness here, and ties resolve by index.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Bundle", "Engine", "Task", "max_min_rates"]

FINISH_TOLERANCE = 1e-9
_SATURATED = 1e-9


@dataclass
class Bundle:
    """Flows moving ``bytes_per_flow`` each at one rate; ``links``/``weight``: the load they put on each link."""

    links: np.ndarray
    weight: np.ndarray
    bytes_per_flow: float
    flows: int = 1


@dataclass
class Task:
    """A step of work: latency, then bundles in parallel, then ``post_s``; starts after ``deps``."""

    name: str
    bundles: list[Bundle] = field(default_factory=list)
    latency_s: float = 0.0
    min_s: float = 0.0
    post_s: float = 0.0
    deps: list[int] = field(default_factory=list)
    tag: str = ""  # what it belongs to (a collective, a phase), for the results
    start_s: float = -1.0
    transfer_start_s: float = -1.0
    end_s: float = -1.0


def max_min_rates(
    links: np.ndarray, bundle: np.ndarray, weight: np.ndarray, capacity: np.ndarray, bundles: int
) -> np.ndarray:
    """Per-flow max-min fair rate of each bundle (inf for a bundle that crosses no link) by progressive filling.

    ``links``, ``bundle``, ``weight``: one entry per (bundle, link) with the bundle's flows on that link.
    """
    rate = np.full(bundles, np.inf)
    if links.size == 0:
        return rate
    used, lid = np.unique(links, return_inverse=True)
    cap = capacity[used].astype(np.float64)
    if (cap <= 0).any():
        raise ValueError("a bundle crosses a link of no capacity")
    resid = cap.copy()
    rate[np.unique(bundle)] = 0.0
    frozen = np.zeros(bundles, dtype=bool)
    active = np.ones(links.size, dtype=bool)
    eb, el, ew = bundle, lid, weight
    while eb.size:
        load = np.bincount(el, weights=ew, minlength=used.size)
        loaded = load > 0
        inc = float(np.min(resid[loaded] / load[loaded]))
        live = np.unique(eb)
        rate[live] += inc
        resid -= inc * load
        full = loaded & (resid <= _SATURATED * cap)
        if not full.any():  # rounding: freeze the tightest link
            tight = np.where(loaded, resid / np.maximum(load, 1e-300), np.inf)
            full = tight <= tight.min() * (1 + 1e-12)
        frozen[np.unique(eb[full[el]])] = True
        active = ~frozen[eb]
        eb, el, ew = eb[active], el[active], ew[active]
    return rate


class Engine:
    """Runs tasks over links of ``capacity``; records when each task ran and what each link carried."""

    def __init__(self, capacity: np.ndarray, link_class: np.ndarray | None = None, classes: int = 0) -> None:
        self.capacity = capacity
        self.tasks: list[Task] = []
        self.link_bytes = np.zeros(capacity.shape[0])
        self.link_class = link_class
        self.classes = classes
        self.timeline: list[tuple[float, float, np.ndarray, np.ndarray]] = []  # (t0, t1, mean util, max util)
        self.events = 0
        self.recomputations = 0

    def add(self, task: Task) -> int:
        self.tasks.append(task)
        return len(self.tasks) - 1

    def run(self) -> float:
        """Simulate every task; the time the last one ends."""
        tasks = self.tasks
        n = len(tasks)
        waiting = np.array([len(t.deps) for t in tasks], dtype=np.int64)
        children: list[list[int]] = [[] for _ in range(n)]
        for i, t in enumerate(tasks):
            for d in t.deps:
                if not 0 <= d < i:
                    raise ValueError(f"task {t.name!r} depends on task {d}, which does not come before it")
                children[d].append(i)
        timers: list[tuple[float, int, int, int]] = []  # (time, order, kind, task): kind 0 transfer start, 1 end
        order = 0
        now = 0.0
        # active bundles: parallel lists
        act_task: list[int] = []
        act_bundle: list[Bundle] = []
        remaining = np.zeros(0)
        rate = np.zeros(0)
        open_bundles = np.zeros(n, dtype=np.int64)
        done = 0

        def start(i: int, at: float) -> None:
            nonlocal order
            tasks[i].start_s = at
            heapq.heappush(timers, (at + tasks[i].latency_s, order, 0, i))
            order += 1

        for i in range(n):
            if waiting[i] == 0:
                start(i, 0.0)
        changed = False
        entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        while done < n:
            if changed:
                entries = self._entries(act_bundle)
                rate = max_min_rates(*entries, self.capacity, len(act_bundle)) if act_bundle else np.zeros(0)
                self.recomputations += 1
                changed = False
            t_flow = np.inf
            if act_bundle:
                with np.errstate(divide="ignore"):
                    finish = np.where(rate > 0, remaining / np.where(rate > 0, rate, 1.0), np.inf)
                finish[np.isinf(rate)] = 0.0
                t_flow = now + float(finish.min())
            t_timer = timers[0][0] if timers else np.inf
            if not np.isfinite(min(t_flow, t_timer)):
                raise RuntimeError("simulation stalled: bundles with no rate and nothing else to do")
            t_next = min(t_flow, t_timer)
            dt = t_next - now
            if act_bundle and dt > 0:
                moved = np.where(np.isinf(rate), remaining, rate * dt)
                remaining = remaining - moved
                assert entries is not None
                el, eb, ew = entries
                per_link = moved[eb] * ew
                np.add.at(self.link_bytes, el, per_link)
                self._record(now, t_next, el, ew * rate[eb])
            now = t_next
            self.events += 1
            # bundles finishing now (within tolerance)
            if act_bundle:
                tol = FINISH_TOLERANCE * max(now, 1e-12)
                fin = (remaining <= tol * np.where(np.isinf(rate), 1.0, rate)) | np.isinf(rate)
                if fin.any():
                    keep = ~fin
                    for k in np.nonzero(fin)[0]:
                        ti = act_task[k]
                        open_bundles[ti] -= 1
                        if open_bundles[ti] == 0:
                            tk = tasks[ti]
                            end = max(now, tk.transfer_start_s + tk.min_s) + tk.post_s
                            heapq.heappush(timers, (end, order, 1, ti))
                            order += 1
                    act_task = [t for t, k in zip(act_task, keep) if k]
                    act_bundle = [b for b, k in zip(act_bundle, keep) if k]
                    remaining = remaining[keep]
                    changed = True
            while timers and timers[0][0] <= now + FINISH_TOLERANCE * max(now, 1e-12):
                _, _, kind, ti = heapq.heappop(timers)
                tk = tasks[ti]
                if kind == 0:
                    tk.transfer_start_s = now
                    live = [b for b in tk.bundles if b.bytes_per_flow > 0 and b.links.size]
                    if not live:
                        heapq.heappush(timers, (now + tk.min_s + tk.post_s, order, 1, ti))
                        order += 1
                        continue
                    open_bundles[ti] = len(live)
                    act_task += [ti] * len(live)
                    act_bundle += live
                    remaining = np.concatenate([remaining, [b.bytes_per_flow for b in live]])
                    changed = True
                else:
                    tk.end_s = now
                    done += 1
                    for c in children[ti]:
                        waiting[c] -= 1
                        if waiting[c] == 0:
                            start(c, now)
        return max((t.end_s for t in tasks), default=0.0)

    @staticmethod
    def _entries(bundles: list[Bundle]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not bundles:
            z = np.zeros(0, np.int64)
            return z, z, np.zeros(0)
        lens = np.array([b.links.size for b in bundles])
        eb = np.repeat(np.arange(len(bundles)), lens)
        return np.concatenate([b.links for b in bundles]), eb, np.concatenate([b.weight for b in bundles])

    def _record(self, t0: float, t1: float, links: np.ndarray, load: np.ndarray) -> None:
        """Per link class, the mean and the highest utilisation over [t0, t1)."""
        if self.link_class is None or t1 <= t0:
            return
        per_link = np.bincount(links, weights=load, minlength=self.capacity.shape[0])
        used = per_link > 0
        util = np.zeros(self.capacity.shape[0])
        util[used] = per_link[used] / self.capacity[used]
        cls = self.link_class
        counts = np.bincount(cls, minlength=self.classes)
        mean = np.bincount(cls, weights=util, minlength=self.classes) / np.maximum(counts, 1)
        peak = np.zeros(self.classes)
        np.maximum.at(peak, cls[used], util[used])
        if self.timeline and self.timeline[-1][1] == t0 and np.allclose(self.timeline[-1][2], mean):
            last = self.timeline[-1]
            self.timeline[-1] = (last[0], t1, last[2], np.maximum(last[3], peak))
        else:
            self.timeline.append((t0, t1, mean, peak))
