"""``RemoteData``: the served graph seen like a PyG ``Data``.

A PyG script reads ``data.num_features``, ``dataset.num_classes``,
``data.train_mask`` and ``data.y`` next to its loaders. Over partition
servers those live remotely; ``RemoteData`` answers them, so that porting a
script changes the line that loads the dataset and little else::

    data = pyg_dist.RemoteData()              # was: data = Reddit(path)[0]
    loader = DistNeighborLoader(data, input_nodes=data.train_mask, ...)
    model = SAGE(data.num_features, 256, data.num_classes)

It *is* the ``(feature_store, graph_store)`` pair (a ``tuple`` subclass), so
it goes wherever that pair goes: :class:`~pyg_dist.loader.DistNeighborLoader`,
:class:`~pyg_dist.sampler.DistNeighborSampler`, PyG's own loaders. Sizes come
from the servers' ``meta`` (no fetch); node attributes are fetched on first
access. Attributes with at most one value per node (masks, labels) are kept
after that; wider ones (``x``) are fetched on every access, as they are what
does not fit a trainer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import TensorAttr

from pyg_dist.errors import StoreError
from pyg_dist.store.remote_feature_store import RemoteFeatureStore
from pyg_dist.store.remote_graph_store import RemoteGraphStore


class RemoteData(tuple):
    """A Data-like, read-only view of a graph served by partition servers.

    Args:
        addresses: Server addresses as for :func:`pyg_dist.connect`
            (``None``: ``PYG_DIST_SERVERS`` or ``PYG_DIST_SERVERS_FILE``).
        config: An :class:`~pyg_dist.rpc.config.RpcConfig`, as for
            :func:`pyg_dist.connect`.
        stores: An existing ``(feature_store, graph_store)`` pair to wrap
            instead of connecting.
        **connect_options: Further keyword options of :func:`pyg_dist.connect`.

    Raises:
        ServerListError, StoreError, RpcError: as :func:`pyg_dist.connect`.
    """

    _cache: dict[str, Tensor]

    def __new__(cls, addresses: Union[Sequence[str], str, None] = None, config: Any = None,
                *, stores: Optional[tuple[RemoteFeatureStore, RemoteGraphStore]] = None,
                **connect_options: Any) -> RemoteData:
        if stores is None:
            from pyg_dist.store.connect import connect

            stores = connect(addresses, config, **connect_options)
        fs, gs = stores
        if not isinstance(fs, RemoteFeatureStore) or not isinstance(gs, RemoteGraphStore):
            raise StoreError(f"RemoteData wraps the pair returned by pyg_dist.connect(), got "
                             f"({type(fs).__name__}, {type(gs).__name__})")
        self = super().__new__(cls, (fs, gs))
        object.__setattr__(self, "_cache", {})
        return self

    @property
    def feature_store(self) -> RemoteFeatureStore:
        """The remote feature store."""
        return self[0]

    @property
    def graph_store(self) -> RemoteGraphStore:
        """The remote graph store."""
        return self[1]

    @property
    def num_nodes(self) -> int:
        """Nodes of the whole graph."""
        return self[1].num_nodes

    @property
    def num_edges(self) -> int:
        """Directed edges of the whole graph."""
        return self[1].num_edges

    @property
    def num_node_features(self) -> int:
        """Columns of ``x`` (0 without ``x``), as PyG's ``Data``."""
        info = self[0].features.get((None, "x"))
        if info is None:
            return 0
        return 1 if not info.shape else int(info.shape[-1])

    @property
    def num_features(self) -> int:
        """Alias of :attr:`num_node_features`, as PyG's ``Data``."""
        return self.num_node_features

    @property
    def num_classes(self) -> int:
        """Classes of ``y``, as PyG's ``Dataset.num_classes``: ``max(y) + 1``
        for integer labels, the columns of ``y`` for multi-label ones.

        Raises:
            StoreError: if the servers hold no ``y``.
        """
        info = self[0].features.get((None, "y"))
        if info is None:
            raise StoreError(f"the served graph has no 'y'; it holds {self.keys()}")
        if info.shape and info.dtype.is_floating_point:
            return int(info.shape[-1])
        y = self.y
        return int(y.max()) + 1 if y.numel() else 0

    def keys(self) -> list[str]:
        """Names of the node attributes the servers hold."""
        return sorted(name for group, name in self[0].features if group is None)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (None, name) in self[0].features

    @property
    def edge_index(self) -> Tensor:
        """The whole ``[2, num_edges]`` COO topology, fetched from every
        server (a graph that needs servers rarely fits a trainer: prefer
        the loaders)."""
        row, col = self[1].get_edge_index(edge_type=None, layout="coo")
        return torch.stack([row, col])

    def __getattr__(self, name: str) -> Tensor:
        # Called only for names that are not attributes of the class: node
        # attributes served by the servers (x, y, train_mask, ...).
        if name.startswith("_"):
            raise AttributeError(name)
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        info = self[0].features.get((None, name))
        if info is None:
            raise AttributeError(f"the served graph has no node attribute {name!r}; it holds "
                                 f"{self.keys()}")
        value = self[0].get_tensor(TensorAttr(group_name=None, attr_name=name, index=None))
        if len(info.shape) == 0 or (len(info.shape) == 1 and info.shape[0] == 1):
            self._cache[name] = value  # masks and labels: small, read every epoch
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RemoteData is read-only (the graph lives on the servers); "
                             f"cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"RemoteData is read-only; cannot delete {name!r}")

    def close(self) -> None:
        """Closes the connections of both stores."""
        self[0].close()

    def __enter__(self) -> RemoteData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"RemoteData(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"attrs={self.keys()}, servers={len(self[0].router.endpoints)})")
