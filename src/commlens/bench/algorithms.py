"""``commlens bench --algo``: which implementation runs each row, the built-in collective or a commlens algorithm.

The one place bench reaches into :mod:`commlens.algos` (imported here, when a
run asks for algorithms). ``--algo`` takes a comma list of:

- ``builtin``: the backend's own collective (the default, what nccl-tests times);
- a registered algorithm name (``ring``, ``bruck``, ``hierarchical_leaders``, ...), which every ``--op`` must have;
- ``all``: every registered algorithm of each op but the schemes a selector picks (``hierarchical_ring``,
  ``hierarchical_leaders``, ``hierarchical_one_way``: ``hierarchical`` runs them where they fit);
- ``auto``: the tuning table's choice per size (``commlens tune``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ALL", "AUTO", "BUILTIN", "AlgoCalls", "algo_listing", "auto_note", "expand", "refusal", "validate_algos"]

BUILTIN = "builtin"
AUTO = "auto"
ALL = "all"
_SPECIAL = (BUILTIN, AUTO, ALL)


def validate_algos(names: tuple[str, ...], ops: tuple[str, ...]) -> None:
    """Raise ValueError (naming the known algorithms) unless every name can run every op given."""
    from commlens.algos import ALGO_OPS, algorithms_for

    if not names:
        raise ValueError("no --algo given")
    for name in names:
        if name == BUILTIN:
            continue
        for op in ops:
            if op not in ALGO_OPS:
                raise ValueError(
                    f"--algo {name}: commlens implements no algorithms for {op}; it does for "
                    f"{', '.join(ALGO_OPS)} (use --algo builtin for {op})"
                )
            known = algorithms_for(op)
            if name in (AUTO, ALL):
                if not known:
                    raise ValueError(f"--algo {name}: no {op} algorithm is registered yet")
                continue
            if name not in algorithms_for(op, schemes=True):
                raise ValueError(
                    f"unknown {op} algorithm {name!r}; known: {', '.join(known) or 'none'} "
                    f"(or {', '.join(_SPECIAL)}; `commlens bench --algo list` describes them)"
                )


def expand(names: tuple[str, ...], op: str) -> list[str]:
    """The implementations to run for ``op``, in order: ``all`` becomes every registered name."""
    out: list[str] = []
    for name in names:
        if name == ALL:
            from commlens.algos import algorithms_for

            out.extend(algorithms_for(op))
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def algo_listing() -> list[str]:
    """Lines describing every registered algorithm, per op (``commlens bench --algo list``)."""
    from commlens.algos import ALGO_OPS, algorithms_for, get_algorithm

    lines = ["# op               algorithm            chunked  summary"]
    for op in ALGO_OPS:
        for name in algorithms_for(op, schemes=True):
            a = get_algorithm(op, name)
            picked = f"[{a.scheme_of} picks it] " if a.scheme_of else ""
            lines.append(f"{op:<18} {name:<20} {'yes' if a.chunked else 'no':<7}  {picked}{a.summary}")
    lines.append(
        "# also: builtin (the backend's own collective, the default), all (every algorithm of the op "
        "but those [hierarchical picks]), auto (the tuning table's choice; commlens tune)"
    )
    return lines


def refusal(err: BaseException) -> str | None:
    """The reason, when ``err`` is an algorithm refusing a combination (e.g. ``avg`` on integers), else None."""
    from commlens.algos import AlgoError

    return str(err).splitlines()[0] if isinstance(err, AlgoError) else None


def auto_note(
    op: str, size_bytes: int, world: int, *, ranks_per_host: int | None = None
) -> tuple[tuple[str, str], str]:
    """What ``auto`` runs for one row: (algorithm, source) and a note naming it and where the choice came from.

    ``ranks_per_host``: as the row's :class:`AlgoCalls` get it, so the note names what runs.
    """
    from commlens.algos.tuning import lookup

    choice = lookup(op, size_bytes, world, ranks_per_host=ranks_per_host)
    chunk = f", chunk {choice.chunk_bytes} B" if choice.chunk_bytes else ""
    return (
        choice.algo,
        choice.source,
    ), f"auto: {op} from {size_bytes} B on {world} ranks runs {choice.algo} ({choice.source}{chunk})"


class AlgoCalls:
    """Launchers for one row that run a commlens algorithm instead of the backend's collective.

    :meth:`launch` returns a no-argument callable, as :func:`commlens.bench.collectives.prepare` times it; the
    calls are synchronous (the algorithms wait for their own point-to-point messages). They go through
    :func:`commlens.algos.run`, the public calls by op name.
    """

    def __init__(self, algo: str, group: Any, chunk_bytes: int | None, ranks_per_host: int | None) -> None:
        from commlens.algos import run

        self.run = run
        self.group = group
        self.kw = {"algo": algo, "chunk_bytes": chunk_bytes, "ranks_per_host": ranks_per_host}

    def launch(self, op: str, *args: Any) -> Callable[[], None]:
        """A call of ``op``'s public function with ``args``, its arguments before ``group`` in torch.distributed's
        order (``buf, redop`` for all_reduce, ``out, inp`` for all_gather, ...)."""
        run, group, kw = self.run, self.group, self.kw
        return lambda: run(op, *args, group, **kw)
