"""Trainer-side PyG :class:`~torch_geometric.data.FeatureStore` over partition servers.

Every request is routed by the partition book: the ids of a ``TensorAttr``
are grouped by owning server, each server gets one ``get`` request carrying
*all* the attributes asked for with that index, the requests fly at once,
and the rows are put back in the caller's order (:mod:`pyg_dist.routing.row_fetch`);
servers on this host write theirs into the outputs themselves
(:mod:`pyg_dist.rpc.shm.outputs`).
Edge attributes are asked for the same way, with the edge type as
``group_name`` (``(None, None)`` on a homogeneous graph) and global edge ids
as ``index`` (:mod:`pyg_dist.store.edge_fetch`). PyG builds a batch with one
``multi_get_tensor`` call (``x``, ``y``, masks, ... all indexed by the
batch's nodes), so one batch costs one round trip per server. Each request
says how many bytes its answer takes, so that the RPC client can lend a
server on the same host shared memory for it (:mod:`pyg_dist.rpc.shm`)
instead of the answer crossing the socket; the store only asks for rows.

The store is read-only: ``put_tensor`` / ``remove_tensor`` raise
:class:`~pyg_dist.errors.StoreError`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.typing import FeatureTensorType

from pyg_dist.errors import StoreError
from pyg_dist.protocol.ops import GET
from pyg_dist.routing.id_router import Router
from pyg_dist.routing.row_fetch import RowRequest, copy_rows, fetch_rows, row_request
from pyg_dist.routing.servers import FeatureInfo
from pyg_dist.store import known_owners
from pyg_dist.store.tree_outputs import TreeOutputs, TreeSizes

__all__ = ["FeatureInfo", "RemoteFeatureStore", "copy_rows", "edge_group_type",
           "is_edge_group", "outputs_pinned", "pinned_outputs"]

logger = logging.getLogger(__name__)

_local = threading.local()


def outputs_pinned() -> bool:
    """Whether this thread is inside :func:`pinned_outputs`."""
    return getattr(_local, "pinned", False)


@contextlib.contextmanager
def pinned_outputs() -> Iterator[None]:
    """Within this block, on this thread, fetched features land in pinned memory.

    A loader that copies batches to a GPU sets it, so rows are assembled
    straight into page-locked buffers (CUDA's host allocator recycles them)
    that a ``non_blocking`` copy can read, instead of a pageable tensor that
    ``pin_memory()`` would copy once more.
    """
    before = getattr(_local, "pinned", False)
    _local.pinned = True
    try:
        yield
    finally:
        _local.pinned = before


class RemoteFeatureStore(FeatureStore):
    """A read-only PyG ``FeatureStore`` whose node features live on partition servers.

    ``TensorAttr.group_name`` is the node type (``None`` for a homogeneous
    graph), ``attr_name`` the feature (``x``, ``y``, ``train_mask``, ...), and
    ``index`` global node ids (numbered per node type on a heterogeneous
    graph, as in PyG's ``HeteroData``): an int64 tensor or numpy array, a
    boolean mask over all nodes of the type, a slice, an int, or ``None`` for
    every node.

    Build it with :func:`pyg_dist.connect`.

    Args:
        router: Routes requests to the owning servers (shared with the graph
            store).
        features: ``{(group, name): FeatureInfo}`` for every feature served.
        reply_limits: Each part's server's ``max_reply_bytes`` as its
            ``meta`` reported it; a share of a ``get`` whose answer would be
            bigger is asked for in several calls. ``None``: no limit known.
    """

    def __init__(self, router: Router, features: dict[tuple[Optional[str], str], FeatureInfo],
                 reply_limits: Optional[Sequence[Optional[int]]] = None) -> None:
        super().__init__()
        self.router = router
        self.num_nodes = router.num_nodes
        self.features = dict(features)
        self._reply_limits = list(reply_limits or [None] * router.num_parts)
        # Set by connect() from the servers' meta: the graph's identity, and
        # each part's server's host identity (pyg_dist.rpc.shm.host_id).
        self.graph_id: Any = None
        self.server_hosts: list[Optional[str]] = [None] * router.num_parts
        # Set by connect(): edge attributes by global edge id (``get_edges``).
        self.edge_features: Any = None
        self._local: Optional[list[int]] = None  # local_parts(), once asked
        # Learnable embeddings served as node attributes (add_embedding):
        # ``{(group, name): embedding}``, asked for their rows with autograd.
        self.embeddings: dict[tuple[Optional[str], str], Any] = {}
        self.tree_sizes = TreeSizes()
        """How many rows :meth:`tree_outputs` lends a tree (its trees' sizes so far)."""

    def add_embedding(self, node_type: Optional[str], name: str, embedding: Any) -> None:
        """Serves ``embedding(ids)`` (a :class:`pyg_dist.DistEmbedding`) as
        the node attribute ``name`` of ``node_type``: batches carry its rows
        like any feature, with autograd back to the table. Not in
        :attr:`features`, so a ``CachedFeatureStore`` never caches it (its
        rows change every step).

        Raises:
            StoreError: if the servers hold a feature of that name, or
                another embedding is served under it.
        """
        key = (node_type, name)
        self.router.book_of(node_type)  # an unknown node type says so
        if key in self.features or self.embeddings.get(key, embedding) is not embedding:
            raise StoreError(f"node type {node_type!r} already has an attribute {name!r}; "
                             f"serve the embedding under another name")
        self.embeddings[key] = embedding

    @property
    def colocated_parts(self) -> tuple[int, ...]:
        """The parts served in this process (``connect(colocate=True)``)."""
        return self.router.in_process_parts

    def local_parts(self) -> list[int]:
        """The parts whose servers run on this host (as their ``meta`` said)
        and are not served in this process (those answer with ordinary
        tensors: nothing to lend them)."""
        from pyg_dist.rpc.shm import host_id

        here = host_id()
        return [part for part, host in enumerate(self.server_hosts)
                if host is not None and host == here and part not in self.colocated_parts]

    def node_ids(self, index: Any, node_type: Optional[str] = None) -> tuple[Tensor, bool]:
        """Global int64 ids of a ``TensorAttr.index`` of ``node_type`` (see
        the class docstring for the forms it takes), checked against the
        graph, and whether it was a scalar.

        Raises:
            StoreError: for an index of another type or out of range.
            UnknownTypeError, GraphKindMismatchError: for a node type the
                graph does not have.
        """
        return self._to_ids(index, node_type)

    def close(self) -> None:
        """Closes the connections shared with the graph store (the RPC
        client hands back the memory it lent)."""
        self.router.close()

    def __enter__(self) -> RemoteFeatureStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # PyG FeatureStore interface ############################################

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """Every feature the servers hold (and every embedding served as an
        attribute), without an index."""
        return [self._tensor_attr_cls.cast(group, name)
                for group, name in [*self.features, *self.embeddings]]

    def _put_tensor(self, *_: Any) -> bool:  # and _remove_tensor: the same refusal
        raise StoreError("RemoteFeatureStore is read-only: features live on the partition "
                         "servers; partition the changed graph again instead")

    _remove_tensor = _put_tensor

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[tuple[int, ...]]:
        if is_edge_group(attr.group_name):
            edge_type = edge_group_type(attr.group_name)
            info = None if self.edge_features is None else \
                self.edge_features.info(edge_type, attr.attr_name)
            if info is None:
                return None
            num = self.edge_features.num_edges[edge_type] if attr.index is None else \
                self.edge_features.check_ids(edge_type, _edge_index(attr.index)).numel()
            return (num, *info.shape)
        info = self.features.get((attr.group_name, attr.attr_name))
        embedding = self.embeddings.get((attr.group_name, attr.attr_name))
        if info is None and embedding is None:
            return None
        ids, _ = self._to_ids(attr.index, attr.group_name)
        shape = info.shape if info is not None else (embedding.embedding_dim,)
        return (ids.numel(), *shape)

    def _get_tensor(self, attr: TensorAttr) -> Optional[FeatureTensorType]:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[Optional[FeatureTensorType]]:
        """Fetches all ``attrs``, node and edge attributes, with one request
        per server, index and type, all in flight at once (one round trip);
        embeddings served as attributes read their rows with autograd, in
        the same round trip."""
        return self._fetch_features(attrs)

    def _fetch_features(self, attrs: list[TensorAttr]) -> list[Optional[FeatureTensorType]]:
        """The served features (and edge attributes, and embeddings' rows)
        of ``attrs``."""
        if not attrs:
            return []
        reads = []  # (position, embedding, attr) of embeddings served as attributes
        plan: dict[tuple[Any, Any], list[int]] = {}
        prepared: dict[tuple[Any, Any], tuple[Tensor, bool]] = {}
        for i, attr in enumerate(attrs):
            embedding = self.embeddings.get((attr.group_name, attr.attr_name)) \
                if self.embeddings else None
            if embedding is not None:
                reads.append((i, embedding, attr))
                continue
            key = (id(attr.index), attr.group_name)
            if is_edge_group(attr.group_name):
                # Checked once, by the fetcher's row_request below.
                fetcher, edge_type = self._edge_fetcher(), edge_group_type(attr.group_name)
                if key not in prepared:
                    prepared[key] = (torch.arange(fetcher.num_edges.get(edge_type, 0))
                                     if attr.index is None else _edge_index(attr.index), False)
            else:
                self._check_node_attr(attr)
                if key not in prepared:
                    # A tensor's range is checked by the split below (one
                    # pass); ids a tree coordinator grouped by owner
                    # (known_owners) are checked by the servers they go to.
                    prepared[key] = self._to_ids(attr.index, attr.group_name, in_range=False)
            # Attributes sharing one index object travel in one request.
            plan.setdefault(key, []).append(i)
        pin = outputs_pinned()
        # Same-host servers write the rows into the outputs (page-locked
        # ones when the batch goes to a GPU), every node type of a
        # heterogeneous batch too.
        pool = self.output_pool()
        requests = []
        for key, members in plan.items():
            group, ids = key[1], prepared[key][0]
            names = [attrs[i].attr_name for i in members]
            if is_edge_group(group):
                requests.append(self._edge_fetcher().row_request(
                    edge_group_type(group), ids, names, pin=pin))
            else:
                infos = [self.features[(group, name)] for name in names]
                known = known_owners.take_rows(ids, names) if group is None else None
                if known is not None:
                    # Written by the owners during the tree (tree_outputs):
                    # nothing left to ask.
                    requests.append(RowRequest(GET.name, {}, names, known, []))
                    continue
                shares = (group is None and known_owners.take(ids)) or \
                    (self.router.split_checked(ids, "TensorAttr.index", group)
                     if ids.numel() else [])
                args = {"groups": [{"group": group, "attrs": names}]}
                requests.append(row_request(GET.name, args, names, infos, ids.numel(), shares,
                                            self._reply_limits, pin, pool))
        pending = []
        for i, embedding, attr in reads:
            ids, scalar = self._to_ids(attr.index, attr.group_name)
            pending.append((i, scalar, embedding, embedding.start_read(ids, pin=pin, pool=pool)))
        self.router.count_copied_rows(
            fetch_rows(self.router, [*requests, *(p[3].request for p in pending)],
                       reply_limits=self._reply_limits))
        out: list[Optional[FeatureTensorType]] = [None] * len(attrs)
        for (key, members), request in zip(plan.items(), requests):
            scalar = prepared[key][1]
            for i, tensor in zip(members, request.outs):
                out[i] = tensor[0] if scalar else tensor
        for i, scalar, embedding, read in pending:
            rows = embedding.finish_read(read)
            out[i] = rows[0] if scalar else rows
        return out

    def get_all_edge_tensor_attrs(self) -> list[TensorAttr]:
        """Every edge attribute the servers hold, without an index:
        ``group_name`` is the edge type, ``(None, None)`` on a homogeneous
        graph (as in PyG's distributed stores), ``index`` takes global edge
        ids (a batch's ``e_id``).

        They are not in :meth:`get_all_tensor_attrs`, which PyG's loaders
        index by node ids."""
        if self.edge_features is None:
            return []
        return [self._tensor_attr_cls.cast((None, None) if t is None else t, name)
                for t, name in self.edge_features.attrs()]

    def tree_outputs(self, seeds: int, bound: int, coordinator: int) -> Optional[TreeOutputs]:
        """Outputs for every node feature of a homogeneous graph's batch of
        ``seeds`` seeds and at most ``bound`` nodes, lent to its
        ``sample_tree`` coordinator (:mod:`pyg_dist.store.tree_outputs`;
        as many rows as recent trees had nodes a seed, with headroom);
        ``None`` when they cannot be: no node features, typed nodes, no
        output pool, a coordinator on another host, or no segment of that
        size (its rows are then fetched as usual)."""
        attrs = [name for group, name in self.features if group is None]
        pool = self.output_pool() if attrs and len(attrs) == len(self.features) else None
        if pool is None or not pool.places(coordinator):
            return None
        infos = [self.features[(None, name)] for name in attrs]
        rows = self.tree_sizes.rows(seeds, bound)
        lease = pool.lease([(info.dtype, (rows, *info.shape)) for info in infos],
                           page_locked=outputs_pinned(), index_ids=rows)
        if lease is None:
            return None
        places = [lease.arg(part) if pool.places(part) else None
                  for part in range(self.router.num_parts)]
        return TreeOutputs(attrs, lease, places, coordinator)

    def output_pool(self) -> Any:
        """The router's pool of output segments that same-host servers write
        rows into (:mod:`pyg_dist.rpc.shm.outputs`), or ``None``."""
        if self._local is None:
            self._local = self.local_parts()
        return self.router.output_pool(self._local)

    def _check_node_attr(self, attr: TensorAttr) -> None:
        if (attr.group_name, attr.attr_name) not in self.features:
            self.router.book_of(attr.group_name)  # an unknown node type says so
            known = ", ".join(f"{g}/{n}" if g else n for g, n in self.features) or "none"
            raise StoreError(f"no feature {attr.attr_name!r} (group {attr.group_name!r}) "
                             f"on the servers; they hold: {known}")

    def _edge_fetcher(self) -> Any:
        if self.edge_features is None:
            raise StoreError("the servers serve no edge attributes (an older server, or a "
                             "store not built by pyg_dist.connect())")
        return self.edge_features

    # Internals #############################################################

    def _to_ids(self, index: Any, node_type: Optional[str] = None,
                in_range: bool = True) -> tuple[Tensor, bool]:
        """Global int64 ids of a ``TensorAttr.index`` of ``node_type``, and
        whether it was scalar; ``in_range=False`` leaves a tensor's range to
        the caller (:meth:`~pyg_dist.routing.id_router.Router.split_checked`)."""
        n = self.router.num_nodes_of(node_type)
        if index is None:
            return torch.arange(n), False
        if isinstance(index, slice):
            return torch.arange(n)[index], False
        if isinstance(index, (int, np.integer)):
            i = int(index) + n if int(index) < 0 else int(index)
            return self.router.check_ids(torch.tensor([i]), "TensorAttr.index", node_type), True
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        if not isinstance(index, Tensor):
            raise StoreError(f"TensorAttr.index must be a tensor, numpy array, slice, int "
                             f"or None, got {type(index).__name__}")
        if index.dtype == torch.bool:
            if index.numel() != n:
                raise StoreError(f"a boolean TensorAttr.index must have one entry per node "
                                 f"({n}), got {index.numel()}")
            return index.nonzero().view(-1), False
        if not in_range:
            return self.router.as_ids(index.view(-1).cpu(), "TensorAttr.index"), False
        return self.router.check_ids(index.view(-1).cpu(), "TensorAttr.index", node_type), False

    def __repr__(self) -> str:
        names = ", ".join(n for _, n in self.features)
        return (f"{self.__class__.__name__}(num_nodes={self.num_nodes}, "
                f"features=[{names}], num_parts={self.router.num_parts})")


def is_edge_group(group: Any) -> bool:
    """Whether a ``TensorAttr.group_name`` names edges: an edge type
    ``(src, rel, dst)``, or ``(None, None)`` for a homogeneous graph's edges
    (PyG's distributed stores' convention)."""
    return isinstance(group, tuple) and (len(group) == 3 or group == (None, None))


def edge_group_type(group: tuple) -> Any:
    """The edge type an edge ``group_name`` names (``None``: homogeneous)."""
    return None if group == (None, None) else tuple(group)


def _edge_index(index: Any) -> Any:
    """Edge ids of a ``TensorAttr.index`` given as a tensor, array or list."""
    if isinstance(index, np.ndarray):
        return torch.from_numpy(index)
    if isinstance(index, (list, tuple)):
        return torch.as_tensor(index)
    return index
