"""Distributed neighbour sampling (``loader -> sampler -> store``).

:class:`DistNeighborSampler` is PyG's ``BaseSampler`` over the partition
servers; :class:`SeededSampler` is what a loader needs from a sampler to make
batches reproducible; :class:`NodeIndex` relabels sampled nodes as PyG does.
Names are imported on first use, as in :mod:`pyg_dist`.
"""

from __future__ import annotations

from pyg_dist.lazy_exports import lazy_exports

_EXPORTS = {
    "DistNeighborSampler": "pyg_dist.sampler.dist_neighbor_sampler",
    "SeededSampler": "pyg_dist.sampler.seeded_sampler",
    "SeededNegativeSampling": "pyg_dist.sampler.link_sampling",
    "SamplerMetadata": "pyg_dist.sampler.metadata",
    "NodeIndex": "pyg_dist.hops.relabel",
    "DenseNodeIndex": "pyg_dist.hops.relabel",
    "node_index": "pyg_dist.hops.relabel",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
