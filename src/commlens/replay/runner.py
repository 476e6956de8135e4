"""Launch a replay on real ranks with the bench launcher, and read back what the ranks timed.

``run_replay(plan_path, settings, placement)`` starts ``plan.world_size`` ranks of
:mod:`commlens.replay.worker` through :func:`commlens.bench.launcher.launch_ranks` (this host with
``Local(nproc)``, or the emulated cluster with ``OnCluster``), exactly as ``commlens bench`` starts its
ranks, and returns the :class:`ReplayTimes` rank 0 wrote.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commlens.bench.lifetime import make_workdir
from commlens.errors import CommlensError
from commlens.replay.plan import ReplayPlan, write_plan
from commlens.replay.settings import ReplaySettings
from commlens.results.records import SystemInfo

__all__ = ["ReplayFailure", "ReplayTimes", "load_times", "run_replay"]

TIMES_FORMAT = "commlens.replay-times/1"


class ReplayFailure(CommlensError, RuntimeError):
    """The replay's ranks failed; the message carries the failing rank's last words."""

    exit_code = 1


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


def run_replay(
    plan: ReplayPlan, settings: ReplaySettings, placement: Any = None, command_line: str = ""
) -> ReplayTimes:
    """Replay ``plan`` on ``placement`` (default: ``plan.world_size`` ranks on this host)."""
    from commlens.bench.launcher import Local, RanksFailed, launch_ranks, place, rank_stderr

    ranks = place(placement if placement is not None else Local(plan.world_size))
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
        return ReplayTimes(times.settings, times.system, times.started_at, times.ranks, command_line)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
