"""Names a package loads on first use (PEP 562): the one loader of every package that defers imports.

A package whose names pull in heavy modules (numba kernels, pyarrow, kio) lists where each name
lives and sets ``__getattr__ = lazy_names.loader(__name__, HOMES, globals())``: a caller that needs
one name imports only that name's module, once (the value is then kept in the package's namespace).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def loader(package: str, homes: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``homes`` maps each name to its module."""

    def load(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    return load
