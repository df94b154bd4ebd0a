"""Loaders over served graphs (``loader -> sampler -> store``).

:class:`DistNeighborLoader` is PyG's ``NeighborLoader`` sampling on partition
servers, :class:`DistLinkNeighborLoader` its ``LinkNeighborLoader``;
:class:`DistIteration` is their shared iteration seam; :class:`PrefetchPipeline`
keeps batches in flight on worker threads; :func:`ddp_layout` and
:func:`rank_sampler` split inputs across DDP ranks; :class:`DistMetric`
reduces an evaluation over the ranks' shares and :class:`DDPModel` is DDP
that keeps the model's own methods (``model.inference``). Names are imported on
first use, as in :mod:`pyg_dist`.
"""

from __future__ import annotations

from pyg_dist.lazy_exports import lazy_exports

_EXPORTS = {
    "DistNeighborLoader": "pyg_dist.loader.dist_neighbor_loader",
    "DistLinkNeighborLoader": "pyg_dist.loader.dist_link_neighbor_loader",
    "DistIteration": "pyg_dist.loader.iteration",
    "PrefetchPipeline": "pyg_dist.loader.prefetch",
    "DistMetric": "pyg_dist.loader.evaluation",
    "DDPModel": "pyg_dist.loader.trainer",
    "init_trainer": "pyg_dist.loader.trainer",
    "ddp_layout": "pyg_dist.loader.ddp",
    "rank_sampler": "pyg_dist.loader.ddp",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
