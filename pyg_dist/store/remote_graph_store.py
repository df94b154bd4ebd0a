"""Trainer-side PyG :class:`~torch_geometric.data.GraphStore` over partition servers.

:class:`RemoteGraphStore` serves two audiences:

* PyG itself: ``get_edge_index`` / ``coo()`` / ``csc()`` / ``csr()`` gather the
  whole topology from every server once (cached) and convert it to the
  requested layout, so that PyG's own ``NeighborLoader`` runs over the
  ``(feature_store, graph_store)`` pair. COO is laid out in global edge-id
  order, so PyG's edge permutation maps back to global edge ids.
* :class:`~pyg_dist.sampler.DistNeighborSampler`: :meth:`sample_hop` (the
  hop loop's per-hop function) samples one hop for a batch of nodes on the
  servers that own them, all at once, and returns the answer in the batch's
  order. No topology is held on
  the trainer for this path.

The store is read-only: ``put_edge_index`` / ``remove_edge_index`` raise
:class:`~pyg_dist.errors.StoreError`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, GraphStore
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.index import index2ptr
from torch_geometric.typing import EdgeTensorType, EdgeType
from torch_geometric.utils import index_sort

from pyg_dist.errors import GraphKindMismatchError, StoreError
from pyg_dist.hops.one_hop import Frontier, sample_hop
from pyg_dist.hops.settings import HopSettings
from pyg_dist.partitioning.type_keys import edge_type_key
from pyg_dist.protocol.ops import DEGREE, EDGE_INDEX, SAMPLE, wire_edge_type
from pyg_dist.routing.id_router import Router

logger = logging.getLogger(__name__)


class RemoteGraphStore(GraphStore):
    """A read-only PyG ``GraphStore`` whose topology lives on partition servers.

    Build it with :func:`pyg_dist.connect`, which also builds the matching
    :class:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore`.

    Args:
        router: Routes requests to the owning servers (shared with the
            feature store).
        num_edges: Number of edges of the whole graph, or for a
            heterogeneous graph ``{(src, rel, dst): count}``.
        reply_limits: Each part's server's ``max_reply_bytes`` as its
            ``meta`` reported it: a part's edges are fetched in pages within
            it. ``None`` (an older server): in one call.
    """

    def __init__(self, router: Router, num_edges: Union[int, dict[EdgeType, int]],
                 reply_limits: Optional[Sequence[Optional[int]]] = None) -> None:
        super().__init__()
        self.router = router
        self.num_nodes = router.num_nodes
        # Edges are numbered per edge type; a homogeneous graph has one, None.
        self.edge_counts: dict[Optional[EdgeType], int] = \
            {k: int(v) for k, v in num_edges.items()} if isinstance(num_edges, dict) \
            else {None: int(num_edges)}
        self.num_edges = sum(self.edge_counts.values())
        self._reply_limits = list(reply_limits or [None] * router.num_parts)
        self._coo: dict[Optional[EdgeType], tuple[Tensor, Tensor]] = {}
        self.graph_id: Any = None  # set by connect(): the servers' graph identity
        # Set by connect(): every server carries a batch's hops among its
        # peers (sample_tree, pyg_dist.server.forwarding).
        self.forwarding = False
        self._coo_lock = threading.Lock()

    @property
    def colocated_parts(self) -> tuple[int, ...]:
        """The parts served in this process (``connect(colocate=True)``)."""
        return self.router.in_process_parts

    @property
    def book(self) -> Any:
        """The partition book: maps a global node id to its part (``None``
        on a heterogeneous graph: see :attr:`Router.books`)."""
        return self.router.book

    @property
    def is_hetero(self) -> bool:
        """Whether the served graph is heterogeneous (a ``HeteroData``)."""
        return self.router.is_hetero

    @property
    def node_types(self) -> list[Optional[str]]:
        """Node types (``[None]`` for a homogeneous graph)."""
        return list(self.router.books)

    @property
    def edge_types(self) -> list[Optional[EdgeType]]:
        """Edge types ``(src, rel, dst)`` (``[None]`` for a homogeneous graph)."""
        return list(self.edge_counts)

    def edge_type_key(self, edge_type: Any) -> Optional[EdgeType]:
        """Checks an edge type (``(src, rel, dst)``, a relation name one edge
        type has, or ``None`` on a homogeneous graph) and returns its key.

        Raises:
            UnknownTypeError, GraphKindMismatchError: as the partition reader.
        """
        return edge_type_key(edge_type, self.edge_types, "the served graph")

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """``(node_types, edge_types)`` as ``HeteroData.metadata()`` gives
        them, for ``to_hetero`` and ``HGTConv``.

        Raises:
            GraphKindMismatchError: on a homogeneous graph.
        """
        if not self.is_hetero:
            raise GraphKindMismatchError("a homogeneous graph has no metadata(); to_hetero "
                                         "and HGTConv need a heterogeneous one")
        return list(self.router.books), list(self.edge_counts)

    def close(self) -> None:
        """Closes the connections shared with the feature store."""
        self.router.close()

    def __enter__(self) -> RemoteGraphStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Sampling ##############################################################

    def sample_hop(self, frontiers: Sequence[Frontier],
                   num_neighbors: Union[int, Sequence[int]], seed: int,
                   settings: HopSettings) -> list[tuple[Tensor, Tensor, Tensor]]:
        """Samples one hop for several edge types at once: one request per
        server covering every edge type it owns destinations of
        (``sample``), all in flight together (one round trip); the hop
        loop's per-hop function on the trainer. See
        :func:`pyg_dist.hops.one_hop.sample_hop`."""
        return sample_hop(self.router, frontiers, num_neighbors, seed, settings,
                          num_edges=self.edge_counts)

    def check_sample_attributes(self, weight_attr: Optional[str], time_attr: Optional[str],
                                temporal_strategy: str = "uniform",
                                timeout: Optional[float] = None) -> Optional[str]:
        """Asks every server to sample no seeds by these attributes, so that
        each one loads and checks them now rather than at the first batch.

        Returns:
            Where every server found ``time_attr``: ``"node"`` or ``"edge"``
            (``None`` without a time).

        Raises:
            RemoteError: naming the attribute, if a server cannot draw by it
                (unknown, negative or NaN weights, a time of the wrong dtype).
        """
        # Every edge type of every part: the attribute must exist on each.
        edge_types = [wire_edge_type(t) for t in self.edge_counts]
        args = {"edge_types": edge_types, "sizes": [0] * len(edge_types), "num_neighbors": 0,
                "replace": False, **HopSettings(weight_attr=weight_attr, time_attr=time_attr,
                                temporal_strategy=temporal_strategy).attribute_args()}
        empty = torch.empty(0, dtype=torch.long)
        tensors = [empty, empty] if time_attr is not None else [empty]
        requests = [SAMPLE.request(part, args, tensors) for part in range(self.router.num_parts)]
        replies = self.router.call_all(requests, timeout)
        kinds = {reply.result.get("time_kind") for reply in replies}
        if len(kinds) != 1:
            raise StoreError(f"the servers disagree on where time_attr {time_attr!r} lives: "
                             f"{sorted(map(str, kinds))}; serve one partitioned dataset")
        kind = kinds.pop()
        if time_attr is not None and kind not in ("node", "edge"):
            raise StoreError(f"a server did not say where time_attr {time_attr!r} lives "
                             f"(an older server?); upgrade the servers")
        return kind

    # PyG GraphStore interface ##############################################

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        """One COO edge attribute per edge type, sized ``(N_src, N_dst)``
        (a homogeneous graph's one type is ``None``, sized ``(N, N)``)."""
        return [EdgeAttr(edge_type=t, layout=EdgeLayout.COO, is_sorted=False,
                         size=self._size(t)) for t in self.edge_counts]

    def _size(self, edge_type: Optional[EdgeType]) -> tuple[int, int]:
        if edge_type is None:
            return self.num_nodes, self.num_nodes
        return self.router.num_nodes_of(edge_type[0]), self.router.num_nodes_of(edge_type[-1])

    def _put_edge_index(self, *_: Any) -> bool:  # and _remove_edge_index: the same refusal
        raise StoreError("RemoteGraphStore is read-only: the topology lives on the partition "
                         "servers; partition the changed graph again instead")

    _remove_edge_index = _put_edge_index

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[EdgeTensorType]:
        edge_type = edge_attr.edge_type
        if edge_type not in self.edge_counts:
            return None  # PyG turns None into a KeyError naming the key
        num_src, num_dst = self._size(edge_type)
        if edge_attr.size is not None and tuple(edge_attr.size) != (num_src, num_dst):
            return None
        row, col = self._global_coo(edge_type)
        layout = EdgeLayout(edge_attr.layout)
        if layout == EdgeLayout.COO:
            if edge_attr.is_sorted:
                col, perm = index_sort(col, max_value=num_dst, stable=True)
                row = row[perm]
            return row, col
        if layout == EdgeLayout.CSC:
            col, perm = index_sort(col, max_value=num_dst, stable=True)
            return row[perm], index2ptr(col, num_dst)
        row, perm = index_sort(row, max_value=num_src, stable=True)
        return index2ptr(row, num_src), col[perm]

    def _global_coo(self, edge_type: Optional[EdgeType] = None) -> tuple[Tensor, Tensor]:
        """One edge type's COO in global edge-id order, fetched once."""
        with self._coo_lock:
            if edge_type not in self._coo:
                self._coo[edge_type] = self._fetch_coo(edge_type)
            return self._coo[edge_type]

    def _fetch_coo(self, edge_type: Optional[EdgeType]) -> tuple[Tensor, Tensor]:
        count = self.edge_counts[edge_type]
        row = torch.full((count,), -1, dtype=torch.long)
        col = torch.full((count,), -1, dtype=torch.long)
        self._fetch_edges(range(self.router.num_parts), row, col, edge_type)
        if count and bool((row < 0).any()):
            raise StoreError("the servers together hold fewer edges than meta.json records; "
                             "a partition is missing or stale")
        logger.debug("fetched the global COO of %s (%d edges) from %d servers", edge_type,
                     count, self.router.num_parts)
        return row, col

    def _fetch_edges(self, parts: Any, row: Tensor, col: Tensor,
                     edge_type: Optional[EdgeType] = None) -> None:
        """Puts the edges of ``parts`` into ``row`` / ``col`` at their edge ids."""
        for part, reply in self._edge_pages(parts, edge_type):
            self._take_edges(part, reply, row, col)

    def _edge_pages(self, parts: Any, edge_type: Optional[EdgeType]) -> Iterator[tuple[int, Any]]:
        """``(part, edge_index reply)`` of every page of the edges of ``parts``."""
        # Every part's edges in pages that fit its server's reply limit
        # (24 bytes an edge), all parts' next pages in flight at once.
        pages = {part: 0 for part in parts}
        while pages:
            requests = []
            for part, start in pages.items():
                args: dict[str, Any] = {"edge_type": wire_edge_type(edge_type)}
                limit = self._reply_limits[part]
                if limit is not None:
                    args.update(start=start, count=max(1, limit // _EDGE_BYTES))
                requests.append(EDGE_INDEX.request(part, args))
            replies = self.router.call_all(requests)
            following = {}
            for (part, _, args, _), reply in zip(requests, replies):
                yield part, reply
                taken = reply.tensors[2].numel()
                total = reply.result.get("total")
                if "count" in args and isinstance(total, int) \
                        and args["start"] + taken < total and taken:
                    following[part] = args["start"] + taken
            pages = following

    def part_edge_index(self, part: int, edge_type: Any = None) -> Tensor:
        """The edges of ``edge_type`` stored by ``part`` (those into the
        nodes it owns), as a ``[2, E_part]`` global COO (sources,
        destinations)."""
        edge_type = self.edge_type_key(edge_type)
        if not 0 <= int(part) < self.router.num_parts:
            raise StoreError(f"no part {part}: the graph has {self.router.num_parts} parts")
        count = self.edge_counts[edge_type]
        row = torch.full((count,), -1, dtype=torch.long)
        col = torch.full((count,), -1, dtype=torch.long)
        self._fetch_edges([int(part)], row, col, edge_type)
        taken = row >= 0
        return torch.stack([row[taken], col[taken]])

    def in_degree(self, edge_type: Any = None) -> Tensor:
        """Every destination node's in-degree over ``edge_type`` (int64,
        ``[num_nodes of its type]``), one ``degree`` call per server (16
        bytes a node on the wire)."""
        edge_type = self.edge_type_key(edge_type)
        num_dst = self._size(edge_type)[1]
        args = {"edge_type": wire_edge_type(edge_type)}
        requests = [DEGREE.request(part, args) for part in range(self.router.num_parts)]
        degree = torch.full((num_dst,), -1, dtype=torch.long)
        for (part, _, _, _), reply in zip(requests, self.router.call_all(requests)):
            # Two aligned 1-D tensors (checked against DEGREE); the ids
            # against this graph here.
            ids, deg = (t.to(torch.long) for t in reply.tensors)
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_dst):
                raise StoreError(f"server {self.router.endpoints[part]} answered 'degree' "
                                 f"with node ids outside [0, {num_dst})")
            degree[ids] = deg
        if bool((degree < 0).any()):
            raise StoreError("the servers together report degrees for fewer nodes than the "
                             "graph has; a partition is missing or stale")
        return degree

    def out_degree(self, edge_type: Any = None) -> Tensor:
        """Every source node's out-degree over ``edge_type`` (int64,
        ``[num_nodes of its source type]``): how many edges leave it, which
        is how often it can be drawn as a neighbour (PyG's direction: a
        node's neighbours are the sources of its in-edges).

        The servers store edges by destination, so this reads every part's
        edges once, page by page (24 bytes an edge on the wire; only the
        counts are kept).
        """
        edge_type = self.edge_type_key(edge_type)
        num_src = self._size(edge_type)[0]
        degree = torch.zeros(num_src, dtype=torch.long)
        for part, reply in self._edge_pages(range(self.router.num_parts), edge_type):
            src = reply.tensors[0].to(torch.long)
            if src.numel() and (int(src.min()) < 0 or int(src.max()) >= num_src):
                raise StoreError(f"server {self.router.endpoints[part]} sent source ids "
                                 f"outside [0, {num_src}); its partition belongs to another "
                                 f"graph")
            degree += torch.bincount(src, minlength=num_src)
        return degree

    def _take_edges(self, part: int, reply: Any, row: Tensor, col: Tensor) -> int:
        """Puts one ``edge_index`` answer (three aligned 1-D tensors, checked
        against EDGE_INDEX) in place; returns its edge count."""
        src, dst, eid = (t.to(torch.long) for t in reply.tensors)
        if eid.numel() and (int(eid.min()) < 0 or int(eid.max()) >= row.numel()):
            raise StoreError(f"server {self.router.endpoints[part]} sent edge ids outside "
                             f"[0, {row.numel()}); its partition belongs to another "
                             f"graph")
        row[eid], col[eid] = src, dst
        return eid.numel()

    def __repr__(self) -> str:
        types = f", edge_types={len(self.edge_counts)}" if self.is_hetero else ""
        return (f"{self.__class__.__name__}(num_nodes={self.num_nodes}, "
                f"num_edges={self.num_edges}{types}, num_parts={self.router.num_parts})")


# Bytes an edge takes in an ``edge_index`` answer: source, destination, id.
_EDGE_BYTES = 24
