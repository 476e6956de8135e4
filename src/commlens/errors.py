"""The one base of commlens' errors: each error carries the exit code the CLI ends with when it reaches the user.

Library code raises precise exceptions, each a subclass of :class:`CommlensError` (and of ``ValueError`` or
``RuntimeError`` too, where callers catch those); only the CLI turns one into ``error: ...`` on stderr and exits
with its ``exit_code``: 2 for bad usage or input (the default), 1 for a failed check. A leaf: it imports nothing
of commlens, so every stage may import it.
"""

from __future__ import annotations

__all__ = ["CommlensError"]


class CommlensError(Exception):
    """An error a user can act on; ``str()`` says what is wrong and where (``FILE:LINE``, the field, the option).

    ``exit_code`` is the CLI's exit status for it: 2 (bad usage or input) unless a subclass says otherwise; an
    instance may set its own (a failed run's code).
    """

    exit_code: int = 2
