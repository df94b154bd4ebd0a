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

A heterogeneous graph reads like PyG's ``HeteroData``: ``data["movie"]`` is
a :class:`RemoteNodeType` with the same attributes, and
``data.metadata()`` gives what ``to_hetero`` and ``HGTConv`` take::

    data = pyg_dist.RemoteData()
    loader = DistNeighborLoader(data, input_nodes=("movie", data["movie"].train_mask), ...)
    model = to_hetero(GraphSAGE(-1, 64, 2, 3), data.metadata())
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


class RemoteNodeType:
    """The attributes of one node type of a served graph, as PyG's
    ``NodeStorage`` (``None``: the one type of a homogeneous graph).

    Args:
        stores: The ``(feature_store, graph_store)`` pair.
        node_type: The node type.
    """

    def __init__(self, stores: tuple[RemoteFeatureStore, RemoteGraphStore],
                 node_type: Optional[str]) -> None:
        self.__dict__.update(_stores=stores, _type=node_type, _cache={})

    @property
    def num_nodes(self) -> int:
        """Nodes of this type."""
        return self._stores[1].router.num_nodes_of(self._type)

    @property
    def num_node_features(self) -> int:
        """Columns of ``x`` (0 without ``x``), as PyG's ``Data``."""
        info = self._stores[0].features.get((self._type, "x"))
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
        info = self._stores[0].features.get((self._type, "y"))
        if info is None:
            raise StoreError(f"the served graph has no 'y'{self._of()}; it holds "
                             f"{self.keys()}")
        if info.shape and info.dtype.is_floating_point:
            return int(info.shape[-1])
        y = self.y
        return int(y.max()) + 1 if y.numel() else 0

    def keys(self) -> list[str]:
        """Names of the node attributes the servers hold (for this type)."""
        return sorted(name for group, name in self._stores[0].features if group == self._type)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (self._type, name) in self._stores[0].features

    def _of(self) -> str:
        return "" if self._type is None else f" of node type {self._type!r}"

    def __getattr__(self, name: str) -> Tensor:
        # Called only for names that are not attributes of the class: node
        # attributes served by the servers (x, y, train_mask, ...).
        if name.startswith("_"):
            raise AttributeError(name)
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        info = self._stores[0].features.get((self._type, name))
        if info is None:
            raise AttributeError(f"the served graph has no node attribute {name!r}"
                                 f"{self._of()}; it holds {self.keys()}")
        value = self._stores[0].get_tensor(
            TensorAttr(group_name=self._type, attr_name=name, index=None))
        if len(info.shape) == 0 or (len(info.shape) == 1 and info.shape[0] == 1):
            self._cache[name] = value  # masks and labels: small, read every epoch
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RemoteData is read-only (the graph lives on the servers); "
                             f"cannot set {name!r}")

    def __repr__(self) -> str:
        return f"RemoteNodeType({self._type!r}, num_nodes={self.num_nodes}, attrs={self.keys()})"


class RemoteData(tuple):
    """A Data-like (or HeteroData-like), read-only view of a graph served by
    partition servers.

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

    _types: dict[Optional[str], RemoteNodeType]

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
        object.__setattr__(self, "_types", {t: RemoteNodeType((fs, gs), t)
                                            for t in gs.node_types})
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
    def is_hetero(self) -> bool:
        """Whether the served graph is heterogeneous."""
        return self[1].is_hetero

    @property
    def node_types(self) -> list[str]:
        """Node types of a heterogeneous graph (``[]`` when homogeneous)."""
        return [t for t in self[1].node_types if t is not None]

    @property
    def edge_types(self) -> list[tuple[str, str, str]]:
        """Edge types of a heterogeneous graph (``[]`` when homogeneous)."""
        return [t for t in self[1].edge_types if t is not None]

    def metadata(self) -> tuple[list[str], list[tuple[str, str, str]]]:
        """``(node_types, edge_types)``, as ``HeteroData.metadata()``."""
        return self[1].metadata()

    def __getitem__(self, key: Any) -> Any:
        """``data[0]`` / ``data[1]``: the stores (a pair); ``data[node_type]``:
        that type's attributes (:class:`RemoteNodeType`)."""
        if isinstance(key, str):
            self[1].router.book_of(key)  # names the node types if there is none such
            return self._types[key]
        return super().__getitem__(key)

    def _homogeneous(self) -> RemoteNodeType:
        return self._types[None] if None in self._types else self[1].router.book_of(None)

    @property
    def num_nodes(self) -> int:
        """Nodes of the whole graph (every type)."""
        return self[1].num_nodes

    @property
    def num_edges(self) -> int:
        """Directed edges of the whole graph (every type)."""
        return self[1].num_edges

    @property
    def num_node_features(self) -> int:
        """Columns of ``x`` (0 without ``x``), as PyG's ``Data``."""
        return self._homogeneous().num_node_features

    @property
    def num_features(self) -> int:
        """Alias of :attr:`num_node_features`, as PyG's ``Data``."""
        return self.num_node_features

    @property
    def num_classes(self) -> int:
        """Classes of ``y`` (see :attr:`RemoteNodeType.num_classes`)."""
        return self._homogeneous().num_classes

    def keys(self) -> list[str]:
        """Names of the node attributes the servers hold (homogeneous graph)."""
        return self._homogeneous().keys() if not self.is_hetero else []

    def __contains__(self, name: object) -> bool:
        return not self.is_hetero and name in self._types[None]

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
        if self.is_hetero:
            raise AttributeError(f"the served graph is heterogeneous: read {name!r} of a "
                                 f"node type, e.g. data[{self.node_types[0]!r}].{name}")
        return getattr(self._types[None], name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RemoteData is read-only (the graph lives on the servers); "
                             f"cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"RemoteData is read-only; cannot delete {name!r}")

    def to(self, *args: Any, **kwargs: Any) -> RemoteData:
        """``self``: the graph stays on the servers. A PyG script's
        ``dataset[0].to(device, 'x', 'y')`` then works unchanged; batches go
        to a device with the loader's ``device=`` (or ``batch.to``)."""
        return self

    def close(self) -> None:
        """Closes the connections of both stores."""
        self[0].close()

    def __enter__(self) -> RemoteData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        attrs = f"node_types={self.node_types}" if self.is_hetero else f"attrs={self.keys()}"
        return (f"RemoteData(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"{attrs}, servers={len(self[0].router.endpoints)})")
