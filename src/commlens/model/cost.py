"""The shape every cost formula returns: stages of latency, bandwidth and reduction terms.

An algorithm runs as a sequence of stages. Within a stage, latency terms add
up (messages in sequence); bandwidth terms either run at the same time on
different levels (``concurrent``: the stage waits for the slowest, as a
pipelined ring crossing NVLink and NICs does) or one after another; the
reduction either hides under the transfers (fused kernels) or follows them.
The total is the launch cost plus the stages. Every term is kept, so a
prediction can say which level and which term set its time.
"""

from __future__ import annotations

from dataclasses import dataclass

from commlens.model.layout import Layout

__all__ = ["Cost", "Term", "ceil_log2", "floor_log2", "make_terms"]

LAUNCH, UP, OUT, HOST, COMPUTE = "software", "scale_up", "scale_out", "host", "compute"


@dataclass(frozen=True, slots=True)
class Term:
    """One part of a prediction: which stage, level and kind, how much, how long, on the critical path or not."""

    stage: int
    level: str  # software | scale_up | scale_out | host | compute
    kind: str  # launch | latency | bandwidth | reduction
    amount: float  # messages for latency, bytes for bandwidth and reduction
    time_s: float
    critical: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "level": self.level,
            "term": self.kind,
            "amount": self.amount,
            "time_s": self.time_s,
            "critical": self.critical,
        }


class Cost:
    """Accumulates the stages of one algorithm on one layout."""

    __slots__ = ("layout", "time_s", "_terms", "_stages", "_messages", "patterns")

    def __init__(
        self, layout: Layout, messages_per_step: float = 1.0, record: bool = False, terms: bool = True
    ) -> None:
        self.layout = layout
        # with ``record``: each stage's communication pattern (who sends what to whom), as the simulator replays it
        self.patterns: list[tuple[int, tuple, float, float, float]] | None = [] if record else None
        self._messages = messages_per_step  # a backend that splits each step into several messages
        self.time_s = layout.launch_s
        # without ``terms`` only the time is kept (a candidate compared by its time alone)
        self._terms: list[tuple] | None = [(0, LAUNCH, "launch", 1.0, layout.launch_s, True)] if terms else None
        self._stages = 0

    def stage(
        self,
        latency: tuple[tuple[str, float, float], ...] = (),
        bandwidth: tuple[tuple[str, float, float], ...] = (),
        reduce_bytes: float = 0.0,
        concurrent: bool = True,
        one_way: bool = False,
        host_bytes: float = 0.0,
        node_messages: float = 0.0,
        pattern: tuple | None = None,
    ) -> None:
        """Add a stage: ``latency`` as (level, messages, s each), ``bandwidth`` as (level, bytes sent, bytes/s).

        Unless ``one_way`` (each rank only sends or only receives at a time, as
        in a binomial tree), a rank receives as much as it sends; on a level
        that is not full-duplex both count against its budget. ``host_bytes``:
        what all ranks of one node copy together in this stage; on a host with
        a shared copy budget (CPU-driven transports, ranks sharing cores) it
        bounds the stage's transfers as a whole. ``node_messages``: the sends
        and receives all ranks of one node handle in each step; on such a host
        a step costs its latency once per two messages per core, so where the
        node's cores handle more at once its latency terms count that many
        times over (4 ranks on 2 cores: a ring step, 8 messages, costs 2
        latencies; a tree step of two pairs, 4 messages, costs 1).
        ``pattern``: the stage's traffic as :mod:`commlens.sim` replays it (``("ring", passes, bytes_per_rank)``
        and the like, see :mod:`commlens.model.patterns`), kept when the cost records patterns.
        """
        L = self.layout
        self._stages += 1
        index = self._stages
        terms = self._terms
        lat_s = 0.0
        crowd = max(1.0, node_messages / (2.0 * L.host_cores)) if node_messages and L.host_cores else 1.0
        for level, count, alpha in latency:
            if count > 0:
                count *= self._messages * crowd
                t = count * alpha
                lat_s += t
                if terms is not None:
                    terms.append((index, level, "latency", count, t, True))
        moves: list[tuple[str, float, float]] = []
        transfer_s, slowest, n_moves = 0.0, -1, 0
        for level, nbytes, rate in bandwidth:
            if nbytes > 0:
                if not one_way:
                    nbytes *= L.up_both if level == UP else L.out_both
                t = nbytes / rate
                if not concurrent:
                    transfer_s += t
                elif t > transfer_s or slowest < 0:  # the first of the slowest
                    transfer_s, slowest = t, n_moves
                n_moves += 1
                if terms is not None:
                    moves.append((level, nbytes, t))
        host_s = host_bytes / L.host_rate if host_bytes > 0 and L.host_cores else 0.0
        host_binds = host_s > transfer_s
        transfer_s = max(transfer_s, host_s)
        red_s = reduce_bytes / L.reduce_rate if reduce_bytes > 0 else 0.0
        red_binds = red_s > 0 and (not L.reduce_overlaps or red_s > transfer_s)
        if terms is not None:
            hidden = red_binds and L.reduce_overlaps  # the reduction, not the transfers, sets the stage's time
            for k, (level, nbytes, t) in enumerate(moves):
                critical = not host_binds and not hidden and (k == slowest or slowest < 0)
                terms.append((index, level, "bandwidth", nbytes, t, critical))
            if host_s > 0:
                terms.append((index, HOST, "bandwidth", host_bytes, host_s, host_binds and not hidden))
            if red_s > 0:
                terms.append((index, COMPUTE, "reduction", reduce_bytes, red_s, red_binds))
        self.time_s += lat_s + (transfer_s + red_s if not L.reduce_overlaps else max(transfer_s, red_s))
        if self.patterns is not None:
            self.patterns.append((index, pattern if pattern is not None else ("analytic",), lat_s, transfer_s, red_s))

    def raw_terms(self) -> tuple[tuple, ...]:
        """The terms as plain tuples (cheap); :func:`make_terms` turns them into :class:`Term`."""
        if self._terms is None:
            raise ValueError("Cost: built without terms (terms=False) keeps its time only")
        return tuple(self._terms)


def make_terms(raw: tuple[tuple, ...]) -> tuple[Term, ...]:
    """Terms from :meth:`Cost.raw_terms`; stage 0 is the launch, the algorithm's stages count from 1."""
    return tuple(Term(t[0], t[1], t[2], float(t[3]), t[4], t[5]) for t in raw)


def ceil_log2(x: int) -> int:
    """ceil(log2 x) for x >= 1 (0 for 1)."""
    return (x - 1).bit_length() if x > 1 else 0


def floor_log2(x: int) -> int:
    """floor(log2 x) for x >= 1."""
    return x.bit_length() - 1
