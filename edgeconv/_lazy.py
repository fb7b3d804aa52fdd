"""Modules imported on first use, so the light commands (``--help``, ``validate``) never pay for them.

A module that needs NumPy only inside its functions writes::

    if TYPE_CHECKING:
        import numpy as np
    else:
        np = lazy_import("numpy")

and NumPy is imported the first time one of its attributes is read (as in Polygraphy's ``mod.lazy_import``).
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _LazyModule(types.ModuleType):
    """Stands for a module until an attribute is read; then imports it and keeps its attributes."""

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__name__)
        self.__dict__.update(vars(module))  # later reads are plain attribute lookups
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r}>"


def lazy_import(name: str) -> Any:
    return _LazyModule(name)
