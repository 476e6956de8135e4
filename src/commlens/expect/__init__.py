"""Is this bandwidth normal? The expected-performance verdict of a run, with its likely causes.

- :func:`judge_run`: the verdict on a run (system inferred from what it carries, or a given topology).
- :func:`with_log_facts`: the run with the facts of its log (``NCCL INFO`` lines) kept in
  ``system.extra["expect_facts"]``, so that a stored run can be judged later without its file.
- Tables are data shipped with the package: ``systems.yaml`` (GPUs, links, fabrics), ``bands.yaml`` (band
  widths, NCCL's algorithms), ``causes.yaml`` (causes, their signatures and sources).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from commlens.expect.evidence import Fact, facts_from_dicts, facts_to_dicts, log_facts
from commlens.expect.system import ExpectError, InferredSystem
from commlens.expect.verdict import RangeVerdict, RowVerdict, RunVerdict, judge
from commlens.results.records import Run

if TYPE_CHECKING:
    from commlens.topology import Topology

__all__ = [
    "FACTS_KEY",
    "ExpectError",
    "Fact",
    "InferredSystem",
    "RangeVerdict",
    "RowVerdict",
    "RunVerdict",
    "given_facts",
    "judge_run",
    "log_facts",
    "run_facts",
    "with_log_facts",
]

FACTS_KEY = "expect_facts"


def run_facts(run: Run, log_text: str | None = None) -> list[Fact]:
    """The facts of ``log_text`` if given, else those kept with the run."""
    if log_text is not None:
        return log_facts(log_text)
    return facts_from_dicts(run.system.extra.get(FACTS_KEY))


def with_log_facts(run: Run, log_text: str) -> Run:
    """``run`` with its log's facts kept in ``system.extra`` (unchanged if the log has none, or the run already
    keeps facts: a stored run read back keeps the facts of its own log)."""
    if FACTS_KEY in run.system.extra:
        return run
    facts = log_facts(log_text)
    if not facts:
        return run
    system = replace(run.system, extra={**run.system.extra, FACTS_KEY: facts_to_dicts(facts)})
    return replace(run, system=system)


def given_facts(*, nics: int | None = None, nic_gbps: float | None = None) -> list[Fact]:
    """What the user states about the hardware where the log is silent (``--nics``, ``--nic-gbps``); these win over
    the log's facts. :class:`ExpectError` for a value out of range."""
    out = []
    if nics is not None:
        if not 1 <= nics <= 64:
            raise ExpectError(f"--nics {nics}: expected 1 to 64 NICs per node")
        out.append(Fact("nics", nics, 0, f"given: --nics {nics}"))
    if nic_gbps is not None:
        if not 0 < nic_gbps <= 3200:
            raise ExpectError(f"--nic-gbps {nic_gbps}: expected a line rate above 0 and at most 3200 Gb/s")
        out.append(Fact("nic_speed_mbps", round(nic_gbps * 1000), 0, f"given: --nic-gbps {nic_gbps:g}"))
    return out


def judge_run(
    run: Run, *, log_text: str | None = None, topology: Topology | None = None, given: list[Fact] | None = None
) -> RunVerdict:
    """The verdict on ``run``; :class:`ExpectError` when it cannot be judged (no GPU known, no row modelled).
    ``given``: facts the user states (:func:`given_facts`), taken before the log's."""
    return judge(run, [*(given or []), *run_facts(run, log_text)], topology)
