"""Launch a replay on real ranks with the bench launcher, and read back what the ranks timed.

A :class:`ReplayRequest` says what to replay and where (checked when built); ``launch(request)`` starts
``plan.world_size`` ranks of :mod:`commlens.replay.worker` through :func:`commlens.bench.launcher.launch_ranks`
(this host with ``Local(nproc)``, or the emulated cluster with ``OnCluster``), exactly as ``commlens bench``
starts its ranks, and returns the :class:`ReplayTimes` rank 0 wrote. The stage's entry, which also compares and
makes the run, is :func:`commlens.replay.run`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commlens.bench.lifetime import make_workdir
from commlens.errors import CommlensError
from commlens.replay.plan import ReplayPlan, check_runnable, write_plan
from commlens.replay.settings import ReplaySettings
from commlens.results.records import SystemInfo

if TYPE_CHECKING:
    from commlens.bench.launcher import Placement

__all__ = ["ReplayFailure", "ReplayRequest", "ReplayRequestError", "ReplayTimes", "launch", "load_times"]

TIMES_FORMAT = "commlens.replay-times/1"


class ReplayFailure(CommlensError, RuntimeError):
    """The replay's ranks failed; the message carries the failing rank's last words."""

    exit_code = 1


class ReplayRequestError(CommlensError, ValueError):
    """A :class:`ReplayRequest` that cannot run (the message names the field)."""


@dataclass(frozen=True)
class ReplayRequest:
    """What one replay takes: the plan, where its ranks run (``Local(plan.world_size)`` on this host, or
    ``OnCluster``), how it is replayed, the command line and the tag the stored run keeps. Checked when built
    (:class:`ReplayRequestError` naming the field; :class:`~commlens.replay.plan.ReplayPlanError` for a plan
    whose replay would hang)."""

    plan: ReplayPlan
    placement: Placement
    settings: ReplaySettings = ReplaySettings()
    command_line: str = ""
    tag: str | None = None

    def __post_init__(self) -> None:
        from commlens.bench.launcher import Local, OnCluster  # only here: a rank importing the times format skips it

        if not isinstance(self.plan, ReplayPlan):
            raise ReplayRequestError(f"plan: must be a ReplayPlan, got {type(self.plan).__name__}")
        if not isinstance(self.placement, (Local, OnCluster)):
            raise ReplayRequestError(f"placement: must be Local or OnCluster, got {type(self.placement).__name__}")
        if isinstance(self.placement, Local) and self.placement.nproc != self.plan.world_size:
            raise ReplayRequestError(
                f"placement: Local({self.placement.nproc}) places {self.placement.nproc} ranks, the plan has "
                f"{self.plan.world_size}: scale the plan down first (transform.select_group, transform.first_ranks)"
            )
        if not isinstance(self.settings, ReplaySettings):
            raise ReplayRequestError(f"settings: must be ReplaySettings, got {type(self.settings).__name__}")
        if not isinstance(self.command_line, str):
            raise ReplayRequestError(f"command_line: must be text, got {type(self.command_line).__name__}")
        if self.tag is not None and not isinstance(self.tag, str):
            raise ReplayRequestError(f"tag: must be text or None, got {type(self.tag).__name__}")
        check_runnable(self.plan)


@dataclass(frozen=True)
class ReplayTimes:
    """Every rank's replayed calls: ``ranks[r][pass][i] = (start_s, end_s)`` on the host's monotonic clock."""

    settings: ReplaySettings
    system: SystemInfo
    started_at: str
    ranks: dict[int, list[list[tuple[float, float]]]]
    command_line: str = ""


def load_times(path: str | Path, plan: ReplayPlan) -> ReplayTimes:
    """Times a worker wrote (``--out``), checked against the plan they replayed."""
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ReplayFailure(
            f"{path}: cannot read the replay's times ({e})",
        ) from None
    if not isinstance(d, dict) or d.get("format") != TIMES_FORMAT:
        raise ReplayFailure(f"{path}: not replay times (format {TIMES_FORMAT})")
    try:
        system = SystemInfo(
            **{**d["system"], "hosts": tuple(d["system"]["hosts"]), "device_names": tuple(d["system"]["device_names"])}
        )
        ranks = {int(r): [[(float(s), float(e)) for s, e in p] for p in passes] for r, passes in d["ranks"].items()}
        settings = ReplaySettings.from_dict(d["settings"])
    except (KeyError, TypeError, ValueError) as e:
        raise ReplayFailure(f"{path}: malformed replay times ({type(e).__name__}: {e})") from None
    for rc in plan.ranks:
        for p in ranks.get(rc.rank, []):
            if len(p) != len(rc.calls):
                raise ReplayFailure(f"{path}: rank {rc.rank} timed {len(p)} calls, the plan has {len(rc.calls)}")
    return ReplayTimes(settings, system, str(d.get("started_at", "")), ranks)


def launch(request: ReplayRequest) -> ReplayTimes:
    """Replay ``request.plan`` on the ranks of ``request.placement``: the times rank 0 wrote, with the request's
    command line. :class:`ReplayFailure` when a rank fails or the run is interrupted."""
    from commlens.bench.launcher import RanksFailed, launch_ranks, place, rank_stderr

    plan, settings = request.plan, request.settings
    ranks = place(request.placement)
    if ranks.world != plan.world_size:
        raise ReplayFailure(
            f"the plan has {plan.world_size} ranks, the placement {ranks.world}: use --map-ranks or --group to "
            f"scale it down",
        )
    workdir = make_workdir("commlens-replay-")
    try:
        plan_file, settings_file, out = workdir / "plan.json", workdir / "settings.json", workdir / "times.json"
        write_plan(plan, plan_file)
        settings_file.write_text(json.dumps(settings.as_dict()))
        args = ["--plan", str(plan_file), "--settings", str(settings_file), "--out", str(out)]
        try:
            interrupted = launch_ranks("commlens.replay.worker", args, ranks, workdir, capture_stderr=True)
        except RanksFailed as e:
            words = []
            for r in sorted(e.failures):
                tail = [line for line in rank_stderr(workdir, r).splitlines() if line.strip()][-3:]
                words.append(f"rank {r}: " + (" | ".join(tail) if tail else "no message"))
            raise ReplayFailure("the replay failed: " + "; ".join(words)[:2000]) from None
        if interrupted:
            raise ReplayFailure("interrupted; nothing stored")
        times = load_times(out, plan)
        return ReplayTimes(times.settings, times.system, times.started_at, times.ranks, request.command_line)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
