"""Bundled local-store plugins (``memory``, ``mmap``), registered through the
``pyg_dist.feature_stores`` / ``pyg_dist.graph_stores`` entry points."""

from __future__ import annotations

from typing import Any

from pyg_dist.errors import StoreError


def check_no_options(kind: str, options: dict[str, Any]) -> None:
    """Raises :class:`StoreError` if a store that takes no options got some."""
    if options:
        raise StoreError(f"the {kind} store takes no options; got {sorted(options)}")
