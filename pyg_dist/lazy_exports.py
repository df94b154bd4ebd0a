"""Package exports imported on first use (PEP 562).

``import pyg_dist`` (and each sub-package) must stay cheap and must not pull
one side's modules into the other: a partition server importing
``pyg_dist.store.local`` should not load the trainer's remote stores. So the
packages name their public objects and where they live, and each is imported
the first time it is asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str],
                 extra: tuple[str, ...] = ()) -> tuple[Callable[[str], Any],
                                                     Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package with lazy exports.

    Args:
        package: The package's ``__name__``.
        exports: Public name -> the module that defines it.
        extra: Names the package defines itself, listed by ``dir()`` too.

    Returns:
        ``(__getattr__, __dir__)`` to assign at the package's top level.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        vars(sys.modules[package])[name] = value  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(extra))

    return __getattr__, __dir__
