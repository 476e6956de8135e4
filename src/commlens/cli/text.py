"""Stored text made safe to print: tags, notes, revisions and host names can hold anything.

A tag such as ``"\\x1b]0;pwned\\x07"`` printed raw would retitle (or drive) the user's terminal;
printed through :func:`terminal_safe` it shows as ``\\x1b]0;pwned\\x07``.
"""

from __future__ import annotations

import re

__all__ = ["terminal_safe"]

# C0 controls, DEL, C1 controls, and the bidirectional overrides and isolates (which reorder what follows).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str, keep: str = "") -> str:
    """``text`` with every terminal control character shown as an escape (``\\x1b``, ``\\u202e``);
    characters in ``keep`` (say ``"\\n\\t"``) are left as they are."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
