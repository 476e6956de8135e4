"""Round-robin tournament (circle method): every pair of N hosts meets once in N-1 rounds (N rounds when N is odd)."""

from __future__ import annotations

__all__ = ["partner", "rounds"]


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs ``(a, b)`` with ``a < b`` covering all ``n*(n-1)/2`` pairs exactly once.

    Circle method: fix player 0 (or the bye when ``n`` is odd), rotate the others one step per round.
    """
    if n < 2:
        return []
    players: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(players)
    out = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return out


def partner(pairs: list[tuple[int, int]], rank: int) -> int | None:
    """``rank``'s partner in a round, or None when it sits out."""
    for a, b in pairs:
        if rank == a:
            return b
        if rank == b:
            return a
    return None
