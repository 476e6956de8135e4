"""Is this bandwidth normal? The expected-performance verdict of a run, with its likely causes.

- :func:`run`: the stage's entry, one :class:`ExpectRequest` (a run, its log, a topology, the user's facts) in, its
  :class:`RunVerdict` out; :func:`judge_run` is its shorthand.
- :func:`with_log_facts`: the run with the facts of its log (``NCCL INFO`` lines) kept in
  ``system.extra["expect_facts"]``, so that a stored run can be judged later without its file.
- Tables are data shipped with the package: ``systems.yaml`` (GPUs, links, fabrics), ``bands.yaml`` (band
  widths, NCCL's algorithms), ``causes.yaml`` (causes, their signatures and sources).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    "ExpectRequest",
    "Fact",
    "InferredSystem",
    "RangeVerdict",
    "RowVerdict",
    "RunVerdict",
    "given_facts",
    "judge_run",
    "log_facts",
    "run",
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


@dataclass(frozen=True)
class ExpectRequest:
    """What one verdict takes: the run, the text of its log (its ``NCCL INFO`` facts; None: the facts kept with the
    run), the topology to judge on (None: inferred from the run), and facts the user states (:func:`given_facts`),
    taken before the log's. Checked when built (:class:`ExpectError` naming the field)."""

    run: Run
    log_text: str | None = None
    topology: Topology | None = None
    given: tuple[Fact, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.run, Run):
            raise ExpectError(f"run: must be a Run, got {type(self.run).__name__}")
        if self.log_text is not None and not isinstance(self.log_text, str):
            raise ExpectError(f"log_text: must be text or None, got {type(self.log_text).__name__}")
        if self.topology is not None:
            from commlens.topology import Topology  # only here: judging a run at ingest skips the pydantic spec

            if not isinstance(self.topology, Topology):
                raise ExpectError(f"topology: must be a Topology or None, got {type(self.topology).__name__}")
        if not isinstance(self.given, tuple) or not all(isinstance(f, Fact) for f in self.given):
            raise ExpectError("given: must be a tuple of Fact (see given_facts)")


def run(request: ExpectRequest) -> RunVerdict:
    """The verdict on ``request.run``; :class:`ExpectError` when it cannot be judged (no GPU known, no row
    modelled)."""
    return judge(request.run, [*request.given, *run_facts(request.run, request.log_text)], request.topology)


def judge_run(
    measured: Run,
    /,
    *,
    log_text: str | None = None,
    topology: Topology | None = None,
    given: list[Fact] | None = None,
) -> RunVerdict:
    """Shorthand for :func:`run` of the :class:`ExpectRequest` these arguments make."""
    return run(ExpectRequest(measured, log_text, topology, tuple(given or ())))
