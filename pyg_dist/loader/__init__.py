"""Loaders over served graphs (``loader -> sampler -> store``).

:class:`DistNeighborLoader` is PyG's ``NeighborLoader`` sampling on partition
servers; :class:`PrefetchPipeline` keeps batches in flight on worker
threads; :func:`ddp_layout` and :func:`rank_sampler` split inputs across DDP
ranks. Names are imported on first use, as in :mod:`pyg_dist`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DistNeighborLoader": "pyg_dist.loader.dist_neighbor_loader",
    "PrefetchPipeline": "pyg_dist.loader.prefetch",
    "ddp_layout": "pyg_dist.loader.ddp",
    "rank_sampler": "pyg_dist.loader.ddp",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
