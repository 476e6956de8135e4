"""A package's names imported from their modules on first use (PEP 562's module ``__getattr__``).

``regress``, ``store`` and ``topology`` export classes and functions whose modules are slow to import (SciPy's
statistics, SQLAlchemy's ORM, pydantic): a command that needs none of them never loads them. Imports nothing of
commlens, so any stage may use it (a leaf of ``tests/test_layering.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str], namespace: MutableMapping[str, object]
) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package``: a name of ``where`` (name -> module under ``package``) is imported
    from that module when first asked for and bound in ``namespace`` (the package's ``globals()``), so later
    lookups are plain attribute reads and a submodule of the same name, imported later, does not replace it.
    Any other name is an ``AttributeError``, worded as Python's own."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
