"""Distributed neighbour sampling (``loader -> sampler -> store``).

:class:`DistNeighborSampler` is PyG's ``BaseSampler`` over the partition
servers; :class:`SeededSampler` is what a loader needs from a sampler to make
batches reproducible; :class:`NodeIndex` relabels sampled nodes as PyG does.
Names are imported on first use, as in :mod:`pyg_dist`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DistNeighborSampler": "pyg_dist.sampler.dist_neighbor_sampler",
    "SeededSampler": "pyg_dist.sampler.protocol",
    "NodeIndex": "pyg_dist.sampler.relabel",
    "DenseNodeIndex": "pyg_dist.sampler.relabel",
    "node_index": "pyg_dist.sampler.relabel",
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
