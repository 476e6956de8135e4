"""The type of data that is JSON at an edge: a file or HTTP body read, a ``--json`` report written.

Records passed between stages are dataclasses; these aliases type only what is JSON itself, so a reader
must narrow a value (``isinstance``) before using it, where ``Any`` would let it through unchecked. Arrays
and objects are typed as ``Sequence`` and ``Mapping`` (read-only, so covariant): a ``list[int]`` or a
``dict[str, float]`` built by the code is a JSON value as it is; ``isinstance(v, dict)`` narrows one read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

__all__ = ["JsonObject", "JsonValue"]

JsonValue: TypeAlias = str | int | float | bool | None | Sequence["JsonValue"] | Mapping[str, "JsonValue"]
JsonObject: TypeAlias = dict[str, JsonValue]  # one JSON object, as built or as json.loads returns it
