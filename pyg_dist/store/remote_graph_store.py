"""Trainer-side PyG :class:`~torch_geometric.data.GraphStore` over partition servers.

:class:`RemoteGraphStore` serves two audiences:

* PyG itself: ``get_edge_index`` / ``coo()`` / ``csc()`` / ``csr()`` gather the
  whole topology from every server once (cached) and convert it to the
  requested layout, so that PyG's own ``NeighborLoader`` runs over the
  ``(feature_store, graph_store)`` pair. COO is laid out in global edge-id
  order, so PyG's edge permutation maps back to global edge ids.
* :class:`~pyg_dist.sampler.DistNeighborSampler`: :meth:`sample_neighbors`
  samples one hop for a batch of nodes on the servers that own them, all at
  once, and returns the answer in the batch's order. No topology is held on
  the trainer for this path.

The store is read-only: ``put_edge_index`` / ``remove_edge_index`` raise
:class:`~pyg_dist.errors.StoreError`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, GraphStore
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.index import index2ptr
from torch_geometric.typing import EdgeTensorType
from torch_geometric.utils import index_sort

from pyg_dist.errors import StoreError
from pyg_dist.store.routing import Router, reassemble

logger = logging.getLogger(__name__)


class RemoteGraphStore(GraphStore):
    """A read-only PyG ``GraphStore`` whose topology lives on partition servers.

    Build it with :func:`pyg_dist.connect`, which also builds the matching
    :class:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore`.

    Args:
        router: Routes requests to the owning servers (shared with the
            feature store).
        num_edges: Number of edges of the whole graph.
        reply_limits: Each part's server's ``max_reply_bytes`` as its
            ``meta`` reported it: a part's edges are fetched in pages within
            it. ``None`` (an older server): in one call.
    """

    def __init__(self, router: Router, num_edges: int,
                 reply_limits: Optional[Sequence[Optional[int]]] = None) -> None:
        super().__init__()
        self.router = router
        self.num_nodes = router.num_nodes
        self.num_edges = int(num_edges)
        self._reply_limits = list(reply_limits or [None] * router.num_parts)
        self._coo: Optional[tuple[Tensor, Tensor]] = None
        self.graph_id: Any = None  # set by connect(): the servers' graph identity
        self._coo_lock = threading.Lock()

    @property
    def book(self) -> Any:
        """The partition book: maps a global node id to its part."""
        return self.router.book

    def close(self) -> None:
        """Closes the connections shared with the feature store."""
        self.router.close()

    def __enter__(self) -> RemoteGraphStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Sampling ##############################################################

    def sample_neighbors(self, ids: Tensor, num_neighbors: int, replace: bool, seed: int,
                         timeout: Optional[float] = None, *,
                         weight_attr: Optional[str] = None, time_attr: Optional[str] = None,
                         seed_time: Optional[Tensor] = None,
                         temporal_strategy: str = "uniform") -> tuple[Tensor, Tensor, Tensor]:
        """Samples one hop of in-neighbours of ``ids`` on the owning servers.

        Args:
            ids: Global ids of the nodes to sample for (int64, in range).
            num_neighbors: Neighbours per node; ``-1`` takes all of them.
            replace: Sample with replacement.
            seed: Random seed of this hop; every server gets one derived from
                it and its part, so the answer does not depend on timing.
            timeout: Deadline of every call; ``None`` uses the config's.
            weight_attr: An edge attribute to draw by (probability
                proportional to weight; weight 0 never drawn).
            time_attr: A node or edge time: only entries whose time is at
                most the seed's time are drawn.
            seed_time: With ``time_attr``, one int64 time per id.
            temporal_strategy: ``"uniform"`` or ``"last"`` (the most recent).

        Returns:
            ``(counts, neighbours, edge_ids)`` in the order of ``ids``:
            ``counts[i]`` neighbours (global ids) and their global edge ids
            for ``ids[i]``, laid out contiguously.
        """
        if ids.numel() == 0:
            empty = torch.empty(0, dtype=torch.long)
            return empty, empty, empty
        args = {"num_neighbors": int(num_neighbors), "replace": bool(replace),
                **_attribute_args(weight_attr, time_attr, temporal_strategy)}
        aligned = ()
        if time_attr is not None:
            if seed_time is None or seed_time.numel() != ids.numel():
                raise StoreError(f"time_attr {time_attr!r} needs one seed time per id")
            aligned = (seed_time.to(torch.long).view(-1),)
        extra = {part: {"seed": _mix_seed(seed, part)} for part in range(self.router.num_parts)}
        answers = self.router.route(ids, "sample", args, extra_args=extra, timeout=timeout,
                                    aligned=aligned)
        for answer in answers:
            _check_sample_reply(answer.tensors, answer.positions.numel(),
                                self.router.endpoints[answer.part])
        counts, (nbrs, eids) = reassemble(
            ids.numel(), [a.positions for a in answers], [a.tensors[0] for a in answers],
            [(a.tensors[1], a.tensors[2]) for a in answers])
        return counts, nbrs, eids

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
        args = {"num_neighbors": 0, "replace": False,
                **_attribute_args(weight_attr, time_attr, temporal_strategy)}
        empty = torch.empty(0, dtype=torch.long)
        tensors = [empty, empty] if time_attr is not None else [empty]
        replies = self.router.call_all(
            [(part, "sample", args, tensors) for part in range(self.router.num_parts)],
            timeout)
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
        """The one edge attribute of a homogeneous graph: COO, sized (N, N)."""
        return [EdgeAttr(edge_type=None, layout=EdgeLayout.COO, is_sorted=False,
                         size=(self.num_nodes, self.num_nodes))]

    def _put_edge_index(self, edge_index: EdgeTensorType, edge_attr: EdgeAttr) -> bool:
        raise StoreError("RemoteGraphStore is read-only: the topology lives on the partition "
                         "servers; partition the changed graph again instead")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise StoreError("RemoteGraphStore is read-only: the topology lives on the partition "
                         "servers; partition the changed graph again instead")

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[EdgeTensorType]:
        if edge_attr.edge_type is not None:
            return None  # homogeneous store: PyG turns None into a KeyError
        size = (self.num_nodes, self.num_nodes)
        if edge_attr.size is not None and tuple(edge_attr.size) != size:
            return None
        row, col = self._global_coo()
        layout = EdgeLayout(edge_attr.layout)
        if layout == EdgeLayout.COO:
            if edge_attr.is_sorted:
                col, perm = index_sort(col, max_value=self.num_nodes, stable=True)
                row = row[perm]
            return row, col
        if layout == EdgeLayout.CSC:
            col, perm = index_sort(col, max_value=self.num_nodes, stable=True)
            return row[perm], index2ptr(col, self.num_nodes)
        row, perm = index_sort(row, max_value=self.num_nodes, stable=True)
        return index2ptr(row, self.num_nodes), col[perm]

    def _global_coo(self) -> tuple[Tensor, Tensor]:
        """The whole graph's COO in global edge-id order, fetched once."""
        with self._coo_lock:
            if self._coo is None:
                self._coo = self._fetch_coo()
            return self._coo

    def _fetch_coo(self) -> tuple[Tensor, Tensor]:
        row = torch.full((self.num_edges,), -1, dtype=torch.long)
        col = torch.full((self.num_edges,), -1, dtype=torch.long)
        self._fetch_edges(range(self.router.num_parts), row, col)
        if self.num_edges and bool((row < 0).any()):
            raise StoreError("the servers together hold fewer edges than meta.json records; "
                             "a partition is missing or stale")
        logger.debug("fetched the global COO (%d edges) from %d servers",
                     self.num_edges, self.router.num_parts)
        return row, col

    def _fetch_edges(self, parts: Any, row: Tensor, col: Tensor) -> None:
        """Puts the edges of ``parts`` into ``row`` / ``col`` at their edge ids."""
        # Every part's edges in pages that fit its server's reply limit
        # (24 bytes an edge), all parts' next pages in flight at once.
        pages = {part: 0 for part in parts}
        while pages:
            requests = []
            for part, start in pages.items():
                args: dict[str, Any] = {"edge_type": None}
                limit = self._reply_limits[part]
                if limit is not None:
                    args.update(start=start, count=max(1, limit // _EDGE_BYTES))
                requests.append((part, "edge_index", args, []))
            replies = self.router.call_all(requests)
            following = {}
            for (part, _, args, _), reply in zip(requests, replies):
                taken = self._take_edges(part, reply, row, col)
                total = reply.result.get("total")
                if "count" in args and isinstance(total, int) \
                        and args["start"] + taken < total and taken:
                    following[part] = args["start"] + taken
            pages = following

    def part_edge_index(self, part: int) -> Tensor:
        """The edges stored by ``part`` (those into the nodes it owns), as a
        ``[2, E_part]`` global COO (sources, destinations)."""
        if not 0 <= int(part) < self.router.num_parts:
            raise StoreError(f"no part {part}: the graph has {self.router.num_parts} parts")
        row = torch.full((self.num_edges,), -1, dtype=torch.long)
        col = torch.full((self.num_edges,), -1, dtype=torch.long)
        self._fetch_edges([int(part)], row, col)
        taken = row >= 0
        return torch.stack([row[taken], col[taken]])

    def in_degree(self) -> Tensor:
        """Every node's in-degree (int64, ``[num_nodes]``), one ``degree`` call
        per server (16 bytes a node on the wire)."""
        requests = [(part, "degree", {"edge_type": None}, [])
                    for part in range(self.router.num_parts)]
        degree = torch.full((self.num_nodes,), -1, dtype=torch.long)
        for (part, _, _, _), reply in zip(requests, self.router.call_all(requests)):
            address = self.router.endpoints[part]
            if len(reply.tensors) != 2:
                raise StoreError(f"server {address} answered 'degree' with "
                                 f"{len(reply.tensors)} tensors, expected 2")
            ids, deg = (t.to(torch.long) for t in reply.tensors)
            if ids.numel() != deg.numel() or (ids.numel() and (
                    int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes)):
                raise StoreError(f"server {address} answered 'degree' with node ids outside "
                                 f"[0, {self.num_nodes}) or one degree per id missing")
            degree[ids] = deg
        if bool((degree < 0).any()):
            raise StoreError("the servers together report degrees for fewer nodes than the "
                             "graph has; a partition is missing or stale")
        return degree

    def _take_edges(self, part: int, reply: Any, row: Tensor, col: Tensor) -> int:
        """Puts one ``edge_index`` answer in place; returns its edge count."""
        if len(reply.tensors) != 3:
            raise StoreError(f"server {self.router.endpoints[part]} answered 'edge_index' "
                             f"with {len(reply.tensors)} tensors, expected 3")
        src, dst, eid = (t.to(torch.long) for t in reply.tensors)
        if not src.numel() == dst.numel() == eid.numel():
            raise StoreError(f"server {self.router.endpoints[part]} answered 'edge_index' "
                             f"with tensors of different lengths")
        if eid.numel() and (int(eid.min()) < 0 or int(eid.max()) >= self.num_edges):
            raise StoreError(f"server {self.router.endpoints[part]} sent edge ids outside "
                             f"[0, {self.num_edges}); its partition belongs to another "
                             f"graph")
        row[eid], col[eid] = src, dst
        return eid.numel()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_nodes={self.num_nodes}, "
                f"num_edges={self.num_edges}, num_parts={self.router.num_parts})")


# Bytes an edge takes in an ``edge_index`` answer: source, destination, id.
_EDGE_BYTES = 24


def _attribute_args(weight_attr: Optional[str], time_attr: Optional[str],
                    temporal_strategy: str) -> dict[str, Any]:
    """The optional arguments of a weighted or temporal ``sample``; none
    for a uniform one, whose request stays as it was."""
    args: dict[str, Any] = {}
    if weight_attr is not None:
        args["weight_attr"] = weight_attr
    if time_attr is not None:
        args["time_attr"] = time_attr
        args["temporal_strategy"] = temporal_strategy
    return args


def _mix_seed(seed: int, part: int) -> int:
    """splitmix64 of ``(seed, part)``, kept below 2**63 for msgpack/int64."""
    x = (int(seed) + 0x9E3779B97F4A7C15 * (part + 1)) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) >> 1


def _check_sample_reply(tensors: list[Tensor], num_seeds: int, address: str) -> None:
    if len(tensors) != 3:
        raise StoreError(f"server {address} answered 'sample' with {len(tensors)} tensors, "
                         f"expected 3 (counts, neighbours, edge ids)")
    counts, nbrs, eids = tensors
    if counts.numel() != num_seeds or nbrs.numel() != eids.numel() or \
            int(counts.sum()) != nbrs.numel():
        raise StoreError(f"server {address} answered 'sample' inconsistently: {counts.numel()} "
                         f"counts for {num_seeds} seeds summing to {int(counts.sum())}, "
                         f"{nbrs.numel()} neighbours, {eids.numel()} edge ids")
