"""Replay a job's communication as a benchmark: extract a plan from its traces or records, run it on real
ranks, compare the replay with the recording.

- :func:`run`: the stage's entry, one :class:`ReplayRequest` (the plan, its placement, the settings, the command
  line and tag the run keeps) in, its :class:`ReplayReport` (the times, the comparison, the run to store) out;
  :func:`run_replay` is its shorthand, :func:`report_times` the report of times an external launcher's ranks wrote;
- :mod:`~commlens.replay.plan`: the versioned plan format, read as untrusted input;
- :mod:`~commlens.replay.extract`: plans from Kineto traces, monitor records, NCCL Inspector dumps;
- :mod:`~commlens.replay.transform`: scale down, change one thing;
- :mod:`~commlens.replay.runner` and :mod:`~commlens.replay.worker`: the ranks that replay it;
- :mod:`~commlens.replay.compare`: recorded against replayed, and the run stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commlens.replay.compare import ReplayComparison, ReplayReport, report_times
from commlens.replay.extract import extract_plan
from commlens.replay.plan import (
    FORMAT,
    PlanCall,
    PlanGroup,
    RankCalls,
    ReplayPlan,
    ReplayPlanError,
    load_plan,
    write_plan,
)
from commlens.replay.runner import ReplayFailure, ReplayRequest, ReplayRequestError, ReplayTimes, launch, load_times
from commlens.replay.settings import ReplaySettings, ReplaySettingsError

if TYPE_CHECKING:
    from commlens.bench.launcher import Placement

__all__ = [
    "FORMAT",
    "PlanCall",
    "PlanGroup",
    "RankCalls",
    "ReplayComparison",
    "ReplayFailure",
    "ReplayPlan",
    "ReplayPlanError",
    "ReplayReport",
    "ReplayRequest",
    "ReplayRequestError",
    "ReplaySettings",
    "ReplaySettingsError",
    "ReplayTimes",
    "extract_plan",
    "load_plan",
    "load_times",
    "report_times",
    "run",
    "run_replay",
    "write_plan",
]


def run(request: ReplayRequest) -> ReplayReport:
    """The replay stage: the request's plan replayed on its ranks, compared with the recording, made a run of
    source ``replay`` (not stored: the caller stores ``report.run``). :class:`ReplayFailure` when the ranks fail."""
    return report_times(request.plan, launch(request), tag=request.tag)


def run_replay(
    plan: ReplayPlan,
    settings: ReplaySettings = ReplaySettings(),
    placement: Placement | None = None,
    *,
    command_line: str = "",
    tag: str | None = None,
) -> ReplayReport:
    """Shorthand for :func:`run` of the :class:`ReplayRequest` these arguments make (``placement`` None:
    ``plan.world_size`` ranks on this host)."""
    from commlens.bench.launcher import Local

    return run(ReplayRequest(plan, placement or Local(plan.world_size), settings, command_line, tag))
