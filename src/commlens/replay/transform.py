"""Scale a plan down so it runs on fewer ranks than the job had.

- :func:`select_group`: one process group's calls alone (one data-parallel group of a bigger job), its
  ranks renumbered 0..k-1 in group order. The calls on other groups are left out; each kept call's gap
  becomes the time from the end of the previous *kept* call to its start, so the compute and the left-out
  communication between them are waited out as one gap and the step's length is kept.
- :func:`first_ranks`: the job mapped onto its first ``n`` ranks. Kept: every call of ranks 0..n-1, in
  their order, with their per-rank message sizes and gaps. Changed: each group shrinks to its members
  below ``n`` (groups left without any are dropped), so collectives run among fewer peers (their busBW
  factor changes); calls whose root or peer falls outside are left out. With a layout whose inner groups
  (tensor parallel) are contiguous ranks, those stay whole and the outer (data parallel) ones shrink.
"""

from __future__ import annotations

import dataclasses

from commlens.replay.plan import PlanCall, PlanGroup, RankCalls, ReplayPlan, ReplayPlanError, gaps

__all__ = ["first_ranks", "select_group"]


def _regap(calls: list[PlanCall]) -> tuple[PlanCall, ...]:
    new = gaps([(c.start_s, c.start_s + c.duration_s) for c in calls])
    return tuple(dataclasses.replace(c, gap_s=g) for c, g in zip(calls, new))


def select_group(plan: ReplayPlan, name: str) -> ReplayPlan:
    """Only the calls of group ``name``, on its ranks renumbered 0..k-1."""
    group = plan.group(name)
    index = {r: i for i, r in enumerate(group.ranks)}
    renamed = lambda r: None if r is None else index[r]  # noqa: E731
    ranks = []
    for rc in plan.ranks:
        if rc.rank not in index:
            continue
        kept = [dataclasses.replace(c, root=renamed(c.root), peer=renamed(c.peer)) for c in rc.calls if c.group == name]
        ranks.append(RankCalls(index[rc.rank], _regap(kept), rc.host))
    if not any(r.calls for r in ranks):
        raise ReplayPlanError(f"process group {name!r} has no calls in the plan")
    dropped = plan.n_calls - sum(len(r.calls) for r in ranks)
    note = (
        f"scaled down to process group {name!r} ({len(group.ranks)} of {plan.world_size} ranks, global ranks "
        f"{_shown(group.ranks)} as 0..{len(group.ranks) - 1}); {dropped} calls on other groups or ranks left out, "
        f"their time waited out in the gaps"
    )
    return dataclasses.replace(
        plan,
        world_size=len(group.ranks),
        groups=(PlanGroup(name, tuple(range(len(group.ranks)))),),
        ranks=tuple(sorted(ranks, key=lambda r: r.rank)),
        notes=(*plan.notes, note),
    )


def first_ranks(plan: ReplayPlan, n: int) -> ReplayPlan:
    """The job mapped onto its first ``n`` ranks (see the module docstring for what that keeps)."""
    if not 1 <= n <= plan.world_size:
        raise ReplayPlanError(f"--map-ranks must be in 1..{plan.world_size} (the plan's ranks), got {n}")
    if n == plan.world_size:
        return plan
    groups = {g.name: tuple(r for r in g.ranks if r < n) for g in plan.groups}
    ranks, outside = [], 0
    for rc in plan.ranks:
        if rc.rank >= n:
            continue
        kept = []
        for c in rc.calls:
            if (c.root is not None and c.root >= n) or (c.peer is not None and c.peer >= n):
                outside += 1
                continue
            kept.append(c)
        ranks.append(RankCalls(rc.rank, _regap(kept), rc.host))
    shrunk = sorted(g.name for g in plan.groups if 0 < len(groups[g.name]) < len(g.ranks))
    note = (
        f"mapped onto ranks 0..{n - 1} of {plan.world_size}: their calls, order, per-rank sizes and gaps kept; "
        f"groups {', '.join(shrunk) or 'none'} shrunk to their members below {n}"
        + (f"; {outside} calls with a root or peer outside left out" if outside else "")
    )
    return dataclasses.replace(
        plan,
        world_size=n,
        groups=tuple(PlanGroup(name, r) for name, r in groups.items() if r),
        ranks=tuple(ranks),
        notes=(*plan.notes, note),
    )


def _shown(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{ranks[0]}, {ranks[1]}, ..., {ranks[-1]}"
