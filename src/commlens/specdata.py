"""Spec files as untrusted data: YAML without repeated keys, numbers that are numbers.

Shared by every loader of hand-written specs (topologies, workloads, accelerators, sweeps). It imports
nothing of commlens, so ``topology`` and ``cluster`` (which may import nothing of commlens either) can use it,
as every stage uses ``ops``.

- :func:`load_yaml` is ``yaml.safe_load`` (plain data only, no ``!!python`` tags) whose mappings refuse a
  key given twice: YAML keeps the last one silently, so a figure edited in one place and left in another
  would be read from whichever comes last.
  Nesting is bounded (:data:`MAX_NESTING`, checked as each node is composed, before anything deeper
  is read): 10 KB of ``[[[[...`` would otherwise end in a ``RecursionError`` inside the YAML library.
- :func:`refuse_bool_numbers` turns away ``gpus: true`` where a number is expected: pydantic's lax mode
  reads ``true`` as 1.
- :class:`StrictSpec`: the base of the specs' models (topologies, workloads, accelerators, layouts).
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, TypeGuard, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

__all__ = [
    "MAX_NESTING",
    "DuplicateKeyError",
    "SpecValue",
    "StrictSpec",
    "is_spec_value",
    "load_yaml",
    "model_from_data",
    "refuse_bool_numbers",
]

# A value of a spec as YAML's plain types give it (YAML's timestamps and binary aside: see is_spec_value); read
# only (Sequence, Mapping), so a built list[int] or dict[str, float] is one as it is. Readers narrow before use.
SpecValue: TypeAlias = str | int | float | bool | None | Sequence["SpecValue"] | Mapping[str, "SpecValue"]

_SHOWN_KEY_CHARS = 60
# The deepest a spec nests (a sweep's override of a workload's layer list is about 6): far below Python's
# recursion limit, which the YAML composer and constructor recurse into once per level.
MAX_NESTING = 64
# Values in a document with every alias expanded: a shipped spec has a few thousand; aliases of aliases
# ("billion laughs") multiply without bound, and every later walk (pydantic, a sweep) would expand them.
MAX_EXPANDED_VALUES = 1_000_000


class DuplicateKeyError(ValueError):
    """A mapping in a YAML document gives the same key twice; the message names the key and both lines."""


@functools.cache
def _loader(shipped: bool = False) -> type:
    """The loader class: libyaml's parser and composer (``yaml.CSafeLoader``) for the files the package
    ships, pure Python for anything else, whose nesting depth it checks as it composes (the C composer
    recurses without a limit). Both refuse a repeated key."""
    import yaml

    if shipped and getattr(yaml, "__with_libyaml__", False):

        class UniqueKeyCLoader(yaml.CSafeLoader):
            construct_mapping = _unique_keys

        return UniqueKeyCLoader

    class UniqueKeyLoader(yaml.SafeLoader):
        """``yaml.SafeLoader`` whose mappings refuse a repeated key (merge keys ``<<`` may still override) and
        whose documents nest at most :data:`MAX_NESTING` levels."""

        _depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self._depth += 1
            try:
                if self._depth > MAX_NESTING:
                    raise yaml.composer.ComposerError(
                        None, None, f"nested deeper than {MAX_NESTING} levels", self.peek_event().start_mark
                    )
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        construct_mapping = _unique_keys

    return UniqueKeyLoader


def _unique_keys(self: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
    """``construct_mapping`` of both loaders: a repeated key raises :class:`DuplicateKeyError`."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first_line.get(key)
            except TypeError:  # an unhashable key: the base constructor says so
                break
            line = key_node.start_mark.line + 1
            if seen is not None:
                shown = repr(key)
                if len(shown) > _SHOWN_KEY_CHARS:
                    shown = shown[:_SHOWN_KEY_CHARS] + "..."
                raise DuplicateKeyError(f"duplicate key {shown} on line {line} (first on line {seen})")
            first_line[key] = line
    return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)


def load_yaml(text: str, *, shipped: bool = False) -> Any:
    """Plain data from YAML ``text`` as ``yaml.safe_load`` reads it, but a repeated mapping key raises
    :class:`DuplicateKeyError`; malformed YAML, or YAML nested deeper than :data:`MAX_NESTING` levels, raises
    ``yaml.YAMLError``. ``shipped``: a file of the package itself (its size, not its depth, is what costs: the
    C parser reads the projection's tables about 10x faster, which a command's start-up needs)."""
    import yaml

    data = yaml.load(text, Loader=_loader(shipped))  # noqa: S506 - a SafeLoader subclass
    _check_expansion(data)
    return data


def is_spec_value(value: object) -> TypeGuard[SpecValue]:
    """Whether ``value`` is plain spec data (:data:`SpecValue`): no date, timestamp or bytes (YAML reads
    ``2024-01-01`` as a date), no tuple or set, keys all strings."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, list):
        return all(is_spec_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_spec_value(v) for k, v in value.items())
    return False


def _check_expansion(data: Any) -> None:
    """Walk ``data`` as its readers will, aliases expanded: refuse recursion (an alias inside its own anchor)
    and more than :data:`MAX_EXPANDED_VALUES` values."""
    import yaml

    stack: list[tuple[Any, int]] = [(data, 0)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_EXPANDED_VALUES:
            raise yaml.YAMLError(f"more than {MAX_EXPANDED_VALUES:,} values once aliases are expanded")
        if depth > MAX_NESTING:
            raise yaml.YAMLError(f"nested deeper than {MAX_NESTING} levels once aliases are expanded")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _wants_number(annotation: Any) -> bool:
    """The field takes an int or float and not a bool (``int``, ``float | None``)."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) is typing.Literal:  # zero: Literal[0, 1, 2, 3]
        args = typing.get_args(annotation)
        return bool(args) and all(type(a) in (int, float) for a in args)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool not in args and any(a in (int, float) for a in args)
    return False


def _number_values(annotation: Any) -> bool:
    """The field is a mapping to numbers (``dict[str, float]``)."""
    if typing.get_origin(annotation) is dict:
        args = typing.get_args(annotation)
        return len(args) == 2 and _wants_number(args[1])
    return False


def refuse_bool_numbers(model: Any, data: Any) -> Any:
    """For a pydantic ``model_validator(mode="before")``: a ValueError naming the first field of ``model``
    that expects a number and is given ``true``/``false``; ``data`` unchanged otherwise."""
    if not isinstance(data, dict):
        return data
    for name, info in model.model_fields.items():
        value = data.get(name)
        if isinstance(value, bool) and _wants_number(info.annotation):
            raise ValueError(f"{name}: expected a number, got {value!r}")
        if isinstance(value, dict) and _number_values(info.annotation):
            for key, item in value.items():
                if isinstance(item, bool):
                    raise ValueError(f"{name}.{key}: expected a number, got {item!r}")
    return data


class StrictSpec(BaseModel):
    """A spec model that refuses unknown keys, is frozen, refuses NaN and inf (a rate of ``.nan`` would pass
    ``gt=0`` and poison every estimate) and ``true``/``false`` where a number is expected
    (:func:`refuse_bool_numbers`). A subclass's ``model_config`` adds to this one."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        return refuse_bool_numbers(cls, data)


_Model = TypeVar("_Model", bound=BaseModel)


def model_from_data(
    model: type[_Model],
    data: object,
    source: str,
    error: Callable[[str], Exception],
    describe: Callable[[Mapping[str, Any]], str],
) -> _Model:
    """``model`` built from parsed YAML/JSON ``data``; ``error`` naming ``source`` when it is not a mapping, or
    naming each field pydantic refused (``describe``: one pydantic error as the spec's readers quote it)."""
    if not isinstance(data, dict):
        what = model.__name__.lower()
        raise error(f"{source}: expected a mapping of {what} fields, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise error(f"{source}: " + "; ".join(describe(err) for err in e.errors())) from None
