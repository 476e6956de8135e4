"""One compiled function of a third-party package, loaded from its extension module alone.

Importing a scientific package's public module loads everything it offers: ``import ruptures`` loads every
detector and cost (scipy's statistics among them), ``import scipy.special`` scipy's array-API layer. Where
commlens needs one compiled function of such a package, it loads just the extension module that defines it
(the same compiled code, so the same results); None where that cannot be done, and the caller then imports
the package as usual.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
from collections.abc import Callable
from typing import Any

__all__ = ["compiled_function"]


@functools.cache
def compiled_function(package: str, module: str, name: str) -> Callable[..., Any] | None:
    """``name`` of the extension module ``package.module`` (``module`` dotted below the package), or None."""
    try:
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            return None
        *folders, stem = module.split(".")
        for location in found.submodule_search_locations:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(location, *folders, f"{stem}{suffix}")
                spec = importlib.util.spec_from_file_location(f"{package}.{module}", path)
                if spec is None or spec.loader is None or not os.path.exists(path):
                    continue
                try:
                    loaded = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(loaded)
                except (ImportError, OSError):
                    continue
                function = getattr(loaded, name, None)
                return function if callable(function) else None
    except (ImportError, OSError, ValueError):
        return None
    return None
