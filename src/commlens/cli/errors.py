"""Library errors as the CLI shows them: a :class:`~commlens.errors.CommlensError` becomes ``error: ...`` on
stderr and its ``exit_code``, in one place for every command.

``with errors_as_exit():`` around the library calls of a command replaces a catch of each error type one by one
(or of a broad ``ValueError``, which would also swallow a bug).
"""

from __future__ import annotations

from types import TracebackType
from typing import NoReturn

from commlens.cli.app import fail
from commlens.cli.text import terminal_safe
from commlens.errors import CommlensError

__all__ = ["errors_as_exit", "fail_with"]


def fail_with(error: CommlensError, prefix: str = "", *, escape_all: bool = False) -> NoReturn:
    """``error: PREFIX MESSAGE`` on stderr, then exit with the error's code. ``escape_all`` also shows newlines
    and tabs as escapes (a message quoting stored text: a tag, a store URL), not only the other controls."""
    message = f"{prefix}{error}"
    fail(terminal_safe(message) if escape_all else message, error.exit_code)


class errors_as_exit:  # noqa: N801  (used as a function: ``with errors_as_exit():``)
    """Run the block; a :class:`CommlensError` raised in it ends the command through :func:`fail_with`.

    A class, not ``@contextmanager``: its ``__exit__`` never swallows an exception (it returns None), so a type
    checker knows that a block that returns always returns.
    """

    def __init__(self, prefix: str = "", *, escape_all: bool = False) -> None:
        self.prefix = prefix
        self.escape_all = escape_all

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if isinstance(error, CommlensError):
            fail_with(error, self.prefix, escape_all=self.escape_all)
