"""PyG-conformant stores: in-server (one part) and trainer-side (remote).

:func:`pyg_dist.connect` (defined in :mod:`pyg_dist.store.connect`; the
submodule keeps that name here, so the function is not re-exported beside
it) returns the trainer's ``(RemoteFeatureStore, RemoteGraphStore)`` pair,
with :class:`ServerMeta` describing each server, and :class:`RemoteData`
wraps that pair in a Data-like view (``num_features``, masks, labels),
:class:`RemoteDataset` in a one-graph dataset (``dataset[0]``,
``get_idx_split()``);
:class:`PartitionFeatureStore` and :class:`PartitionGraphStore` serve one
part inside ``pyg-dist serve``.
Names are imported on first use, as in :mod:`pyg_dist`, so that a server,
which needs only the local stores, does not load the trainer's.
"""

from __future__ import annotations

from pyg_dist.lazy_exports import lazy_exports

_EXPORTS = {
    "ServerMeta": "pyg_dist.routing.servers",
    "RemoteFeatureStore": "pyg_dist.store.remote_feature_store",
    "FeatureInfo": "pyg_dist.routing.servers",
    "pinned_outputs": "pyg_dist.store.remote_feature_store",
    "RemoteGraphStore": "pyg_dist.store.remote_graph_store",
    "CachedFeatureStore": "pyg_dist.store.cached_feature_store",
    "CacheContext": "pyg_dist.store.cache_policy",
    "RemoteData": "pyg_dist.store.remote_data",
    "RemoteDataset": "pyg_dist.store.remote_dataset",
    "PartitionFeatureStore": "pyg_dist.store.local",
    "PartitionGraphStore": "pyg_dist.store.local",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
