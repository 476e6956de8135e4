"""Command-line values of plain types converted without pydantic: a command starts ~0.1 s sooner.

Typer 0.29 converts every parameter's value through a pydantic ``TypeAdapter`` that it builds on the
parameter's first use, so the first command-line value a command reads imports pydantic (about a third of
the start-up of ``commlens compare`` of two files). For the values a command line mostly holds (a string, a
whole number, a plain decimal, a flag, one of an Enum's choices) the result of that conversion is known
without pydantic: such a value is converted here, to exactly what Typer's adapter returns. Any other value
(``"1e3"`` for a number, ``"yes"`` for a flag, a choice not offered) goes to Typer's own conversion, built on
first need, so its messages stay word for word Typer's; so does every other type (lists, paths, dates,
parsers, ranges). tests/test_cli_coercion.py checks both against Typer's adapters.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

_NOT_PLAIN = object()


def plain_value(annotation: Any, value: Any, case_sensitive: bool = True, ctx: Any = None) -> Any:
    """``value`` (a command-line string or a default) as Typer's adapter for ``annotation`` returns it, or
    ``_NOT_PLAIN`` when only that adapter can say (then nothing is returned here, right or wrong)."""
    kind = type(value)
    if annotation is str:
        return value if kind is str else _NOT_PLAIN
    if annotation is bool:
        return value if kind is bool else _NOT_PLAIN
    if annotation is int:
        if kind is int:
            return value
        return int(value) if kind is str and _whole(value) else _NOT_PLAIN
    if annotation is float:
        if kind is float:
            return value
        return float(value) if kind is str and _decimal(value) else _NOT_PLAIN
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        from typer._param_types import coerce_cli_choice  # Typer's own choice matching (no pydantic)

        try:
            return coerce_cli_choice(value, choices=tuple(annotation), case_sensitive=case_sensitive, ctx=ctx)
        except ValueError:
            return _NOT_PLAIN  # Typer's adapter words the error
    return _NOT_PLAIN


def install() -> bool:
    """Convert plain values without pydantic in every Typer command of this process; False (nothing changed)
    under a Typer that converts otherwise (before 0.29: through click's own types, no pydantic)."""
    try:
        from typer import core as typer_core
        from typer._coercion import RuntimeParam
    except ImportError:
        return False
    found = getattr(typer_core, "build_runtime_param", None)
    if found is None or getattr(found, "_commlens_plain", False):
        return found is not None
    build: Callable[[Any], Any] = found

    class PlainRuntimeParam(RuntimeParam):  # a frozen dataclass of Typer's
        """A parameter of a plain type: plain values here, the rest through Typer's conversion (built once, on
        first need)."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            result = plain_value(self.annotation, value, self.parameter_info.case_sensitive, ctx)
            if result is not _NOT_PLAIN:
                return result
            typers = self.__dict__.get("typers")
            if typers is None:
                typers = build(self.__dict__["descriptor"])
                object.__setattr__(self, "typers", typers)
            return typers._coerce_value(value, param=param, ctx=ctx)

    def build_runtime_param(descriptor: Any) -> Any:
        info = descriptor.parameter_info
        plain_type = descriptor.annotation in (str, bool, int, float) or (
            isinstance(descriptor.annotation, type) and issubclass(descriptor.annotation, Enum)
        )
        ranged = info.min is not None or info.max is not None or info.clamp
        if not plain_type or ranged or info.parser is not None or descriptor.file_annotation is not None:
            return build(descriptor)
        param = PlainRuntimeParam(annotation=descriptor.annotation, parameter_info=info)
        object.__setattr__(param, "descriptor", descriptor)
        return param

    build_runtime_param._commlens_plain = True  # type: ignore[attr-defined]
    typer_core.build_runtime_param = build_runtime_param
    return True


def _digits(text: str, most: int) -> bool:
    return 0 < len(text) <= most and text.isascii() and text.isdigit()


def _whole(text: str) -> bool:
    """A whole number as int() and pydantic read it alike: -?(0|[1-9][0-9]{0,17}) (no "+", "_", "007")."""
    digits = text.removeprefix("-")
    return _digits(digits, 18) and (digits == "0" or digits[0] != "0")


def _decimal(text: str) -> bool:
    """The same for float(): -?[0-9]{1,15}(.[0-9]{1,15})? (no exponent, "inf", ".5")."""
    whole, dot, fraction = text.removeprefix("-").partition(".")
    return _digits(whole, 15) and (not dot or _digits(fraction, 15))
