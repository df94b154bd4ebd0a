"""pyg-dist: distributed neighbour-sampling loaders for PyTorch Geometric.

Partition a graph once (:func:`partition`), serve each part with a
:class:`PartitionServer`, and swap PyG's ``NeighborLoader`` for
:class:`DistNeighborLoader` over the ``(feature_store, graph_store)`` pair
returned by :func:`connect`.

Public names are imported lazily so that ``import pyg_dist`` stays cheap and
the CLI starts fast; ``pyg_dist.X`` and ``from pyg_dist import X`` both work.
"""

from __future__ import annotations

import importlib

from pyg_dist.lazy_exports import lazy_exports

__version__ = "0.1.0"

# Public name -> module defining it. Kept in one table so that the public
# surface is visible at a glance.
_EXPORTS = {
    "partition": "pyg_dist.partitioning.writer",
    "PartitionBook": "pyg_dist.partitioning.book",
    "HeteroPartitionBook": "pyg_dist.partitioning.hetero_book",
    "PartitionReader": "pyg_dist.partitioning.reader",
    "PartitionServer": "pyg_dist.server.partition_server",
    "RpcClient": "pyg_dist.rpc.client",
    "RemoteFeatureStore": "pyg_dist.store.remote_feature_store",
    "RemoteGraphStore": "pyg_dist.store.remote_graph_store",
    "CachedFeatureStore": "pyg_dist.store.cached_feature_store",
    "connect": "pyg_dist.store.connect",
    "RemoteData": "pyg_dist.store.remote_data",
    "RemoteDataset": "pyg_dist.store.remote_dataset",
    "DistNeighborSampler": "pyg_dist.sampler.dist_neighbor_sampler",
    "DistNeighborLoader": "pyg_dist.loader.dist_neighbor_loader",
    "DistLinkNeighborLoader": "pyg_dist.loader.dist_link_neighbor_loader",
    "DistEmbedding": "pyg_dist.embedding.dist_embedding",
    "DistMetric": "pyg_dist.loader.evaluation",
    "DDPModel": "pyg_dist.loader.trainer",
    "init_trainer": "pyg_dist.loader.trainer",
    "PluginRegistry": "pyg_dist.plugins",
    "default_registry": "pyg_dist.plugins",
}

# Sub-packages used as ``pyg_dist.optim.SparseAdam`` after ``import pyg_dist``.
_SUBPACKAGES = ("optim",)

__all__ = sorted(_EXPORTS) + ["__version__"]

_exported, __dir__ = lazy_exports(__name__, _EXPORTS, ("__version__", *_SUBPACKAGES))


def __getattr__(name: str) -> object:
    if name in _SUBPACKAGES:  # imported on first use, as the names are
        return importlib.import_module(f"{__name__}.{name}")
    return _exported(name)
