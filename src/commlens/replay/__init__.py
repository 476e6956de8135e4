"""Replay a job's communication as a benchmark: extract a plan from its traces or records, run it on real
ranks, compare the replay with the recording.

- :mod:`~commlens.replay.plan`: the versioned plan format, read as untrusted input;
- :mod:`~commlens.replay.extract`: plans from Kineto traces, monitor records, NCCL Inspector dumps;
- :mod:`~commlens.replay.transform`: scale down, change one thing;
- :mod:`~commlens.replay.runner` and :mod:`~commlens.replay.worker`: the ranks that replay it;
- :mod:`~commlens.replay.compare`: recorded against replayed, and the run stored.
"""

from __future__ import annotations

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

__all__ = [
    "FORMAT",
    "PlanCall",
    "PlanGroup",
    "RankCalls",
    "ReplayPlan",
    "ReplayPlanError",
    "extract_plan",
    "load_plan",
    "write_plan",
]
