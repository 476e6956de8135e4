"""Options every command that touches the store spells the same way (docs/cli.md), and sets of options
several commands share (:func:`option_set`)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import typer

__all__ = ["DB", "option_set"]

_Command = TypeVar("_Command", bound=Callable[..., Any])

DB = typer.Option(
    None,
    "--db",
    help="the result store: a SQLite path or a URL (default: $COMMLENS_DB, else the user data dir)",
)


def option_set(name: str, options: type[Any]) -> Callable[[_Command], _Command]:
    """A decorator for a command whose parameter ``name`` is a dataclass of options (``options``, each field's
    default a ``typer.Option``): Typer sees the fields as the command's options, in that parameter's place, and
    the command gets the dataclass built from them. Options several commands share are declared once."""
    fields = dataclasses.fields(options)
    hints = typing.get_type_hints(options)

    def decorate(command: _Command) -> _Command:
        signature = inspect.signature(command)
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            if param.name != name:
                params.append(param)
                continue
            params += [
                inspect.Parameter(f.name, param.kind, default=f.default, annotation=hints[f.name]) for f in fields
            ]

        @functools.wraps(command)
        def run(**given: Any) -> Any:
            chosen = options(**{f.name: given.pop(f.name) for f in fields})
            return command(**{name: chosen}, **given)

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": signature.return_annotation}
        return typing.cast(_Command, run)

    return decorate
