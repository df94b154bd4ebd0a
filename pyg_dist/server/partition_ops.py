"""The partition server's operations: ``meta``, ``sample`` (one or several edge
types in one request: :mod:`pyg_dist.server.typed_sample`), ``get``
(one or several node types), ``sizes`` (:mod:`pyg_dist.server.node_features`),
``edge_index``, ``degree``, ``stats`` (argument checks in
:mod:`pyg_dist.server.requests`, sampling by weight or time in
:mod:`pyg_dist.server.sample_attrs`), and the edge attribute ops
``get_edges``, ``edge_ids`` (:mod:`pyg_dist.server.edge_features`).

Every request's arguments and tensors were checked against its op's
declaration (:mod:`pyg_dist.protocol.ops`: types, dtypes, shapes) before its
handler runs; the handler checks what depends on the part (id range,
ownership, edge types and attributes held) before it touches data; a
refusal raises
:class:`~pyg_dist.errors.ProtocolError` (malformed request) or
:class:`~pyg_dist.errors.StoreError` (ids or attributes this part does not
hold), which :class:`~pyg_dist.rpc.RpcServer` turns into an error reply. All
ids on the wire are global.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, GraphStore

from pyg_dist.errors import ProtocolError, StoreError
from pyg_dist.kernels import sample_segments
from pyg_dist.partitioning import PartitionReader
from pyg_dist.partitioning.file_names import edge_ends
from pyg_dist.protocol import ops
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.context import CallContext, uses_context
from pyg_dist.rpc.server import Estimator, Handler
from pyg_dist.rpc.shm import host_id
from pyg_dist.rpc.wire_format import PROTOCOL_VERSION
from pyg_dist.rpc.wire_values import describe
from pyg_dist.server.edge_features import EdgeFeatureOps
from pyg_dist.server.embeddings import EmbeddingOps
from pyg_dist.server.forwarding import HopForwarder
from pyg_dist.server.node_features import NodeFeatureOps
from pyg_dist.server.requests import (
    Csc,
    LocalIndex,
    edge_type_arg,
    page,
    sampled_count,
    seeded_generator,
)
from pyg_dist.server.sample_attrs import SampleAttributes, parse_request, wants_attributes
from pyg_dist.server.typed_sample import split_typed_request

Result = tuple[dict[str, Any], list[Tensor]]

# A ``sample`` whose cheap bound (k per seed) stays under this is charged the
# bound; above it the exact count is worth its gather.
_EXACT_ABOVE = 1 << 20
# Memory a sampling kernel needs besides its answer, from reading
# pyg_dist/kernels/neighbor_sample.py: with replacement or all neighbours,
# two to three times the answer again in int64/float64 temporaries
# (measured: RSS +770 MiB for a 256 MiB answer, +283 MiB for a 64 MiB one);
# without replacement, the sort over every
# candidate entry costs about 48 bytes per candidate (keys, order,
# positions, segments), the dense and Floyd kernels less.
_SAMPLE_WORK_FACTOR = 4
_SAMPLE_CANDIDATE_BYTES = 48



class PartitionOps:
    """The handler table of one part, over its PyG feature and graph stores.

    Args:
        reader: The dataset (for ``meta.json`` and the partition book).
        part: The part served.
        feature_store: PyG feature store indexed by local row.
        graph_store: PyG graph store giving CSC with global source ids,
            ``get_edge_ids(edge_type)`` and ``node_ids(node_type)``.
        max_reply_bytes: Largest reply an operation may produce; bigger
            answers are refused before they are computed.
    """

    def __init__(self, reader: PartitionReader, part: int, feature_store: FeatureStore,
                 graph_store: GraphStore, max_reply_bytes: int = 1 << 30) -> None:
        self.reader = reader
        self.part = part
        self.features = feature_store
        self.graph = graph_store
        self.num_nodes = reader.num_nodes
        # Ids are numbered per node type (a homogeneous graph has one, None).
        self._type_nodes = {t: reader.num_nodes_of(t) for t in reader.node_types}
        self.max_reply_bytes = int(max_reply_bytes)
        self._books = [reader.book.to_tensor()] if not reader.is_hetero else \
            [reader.book_of(t).to_tensor() for t in reader.node_types]
        self._csc: dict[Any, Csc] = {}
        self._indexes: dict[Optional[str], LocalIndex] = {}
        for attr in graph_store.get_all_edge_attrs():
            edge_type = attr.edge_type
            row, colptr = graph_store.get_edge_index(edge_type=edge_type, layout="csc")
            dst = edge_ends(edge_type)[1]
            colptr = colptr.long()
            deg = colptr.diff()
            self._csc[edge_type] = Csc(colptr, deg, row, graph_store.get_edge_ids(edge_type),
                                        self._index(dst), int(deg.max()) if deg.numel() else 0)
        self._nodes = NodeFeatureOps(reader, feature_store, self._type_nodes, self._index,
                                     self._ids, self._check_reply)
        self._edges = EdgeFeatureOps(reader, part, list(self._csc), self._check_reply)
        # Learnable embedding tables (pyg_dist.server.embeddings).
        self.embeddings = EmbeddingOps(part, self._index, self._check_reply)
        self._attributes = SampleAttributes(
            reader, part, {t: (c.row, c.edge_ids, c.deg) for t, c in self._csc.items()})
        self.graph_id = reader.graph_id  # meta's ``graph``
        self._host = host_id()
        # sample_tree; refused until a server gives
        # it its peers (forward_with).
        self.forwarder = HopForwarder(self, None, RpcConfig(max_reply_bytes=max_reply_bytes))

    def serve_with(self, config: RpcConfig) -> None:
        """Fits what the handlers charge to ``config`` (a placed ``get``'s
        charge, :meth:`NodeFeatureOps.bound_placed_charge
        <pyg_dist.server.node_features.NodeFeatureOps.bound_placed_charge>`)."""
        self._nodes.bound_placed_charge(config.inline_reply_bytes, config.client_reply_budget,
                                        config.server_reply_budget)

    def forward_with(self, forwarder: HopForwarder) -> None:
        """Serves ``sample_tree`` with ``forwarder``."""
        self.forwarder = forwarder

    @uses_context
    def sample_tree(self, args: dict[str, Any], tensors: list[Tensor],
                    ctx: Optional[CallContext] = None) -> Result:
        """Every hop of one batch, forwarded among the servers
        (:mod:`pyg_dist.server.forwarding`)."""
        return self.forwarder.sample_tree(args, tensors, ctx)

    def handlers(self) -> dict[str, Handler]:
        """Operation name -> handler, for :class:`~pyg_dist.rpc.RpcServer`:
        one per op of :data:`~pyg_dist.protocol.ops.PARTITION_OPS`, the table
        the trainer's calls are built from."""
        return {ops.META.name: self.meta, ops.SAMPLE.name: self.sample,
                ops.SAMPLE_TREE.name: self.sample_tree,
                ops.EDGE_INDEX.name: self.edge_index, ops.DEGREE.name: self.degree,
                ops.STATS.name: self.stats, **self._nodes.handlers(),
                **self._edges.handlers(), **self.embeddings.handlers()}

    def estimators(self) -> dict[str, Estimator]:
        """Operation name -> size of the answer it would allocate, for
        :class:`~pyg_dist.rpc.RpcServer` (routing by cost, reply budgets).
        ``meta`` and ``sizes`` answer with views or a few bytes: none."""
        return {ops.SAMPLE.name: self.sample_bytes,
                ops.EDGE_INDEX.name: self.edge_index_bytes, **self._nodes.estimators(),
                **self._edges.estimators(), **self.embeddings.estimators()}

    # Validation ############################################################

    def _index(self, node_type: Optional[str]) -> LocalIndex:
        index = self._indexes.get(node_type)
        if index is None:
            if node_type not in self._type_nodes:
                raise StoreError(f"no node type {describe(node_type)} in this graph; it has "
                                 f"{describe(list(self._type_nodes))}")
            index = LocalIndex(self.graph.node_ids(node_type), self._type_nodes[node_type],
                                self.part)
            self._indexes[node_type] = index
        return index

    def _ids(self, tensors: list[Tensor], index: LocalIndex) -> Tensor:
        """Checks the one id tensor of a request; returns the local rows."""
        return index.rows(tensors[0], index.num_nodes)

    def _csc_of(self, args: dict[str, Any]) -> Csc:
        edge_type = edge_type_arg(args.get("edge_type"))
        csc = self._csc.get(edge_type)
        if csc is None:
            shown = describe(edge_type if edge_type is None else list(edge_type))
            raise StoreError(f"part {self.part} holds no edge type {shown}; it holds "
                             f"{list(self._csc)}")
        return csc

    def _check_reply(self, nbytes: int, op: str, hint: str) -> None:
        if nbytes > self.max_reply_bytes:
            raise ProtocolError(
                f"the answer to {op!r} would take {nbytes} bytes, over this server's reply "
                f"limit of {self.max_reply_bytes} bytes (PYG_DIST_MAX_REPLY_BYTES); {hint}")

    # Operations ############################################################

    def meta(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """Counts, feature specs, the partition book(s), versions.

        A homogeneous graph's book is tensor 0 and ``edge_features`` its
        edge attributes. A heterogeneous graph's result also lists
        ``node_types`` (name, node count, features) and ``edge_types``
        (``[src, rel, dst]``, edge count, features), and its tensors are one
        book per node type, in the order of ``node_types``.
        """
        meta = self.reader.meta
        hetero = self.reader.is_hetero
        features = self._nodes.type_features(None) if not hetero else {}
        result = {
            "version": PROTOCOL_VERSION,
            "part": self.part,
            "num_parts": self.reader.num_parts,
            "num_nodes": self.num_nodes,
            "num_edges": self.reader.num_edges,
            "num_local_nodes": int(sum(c.dst.node_ids.numel() for c in self._csc.values())),
            "num_local_edges": int(sum(c.row.numel() for c in self._csc.values())),
            "features": features,
            "edge_features": self._edges.features(None) if not hetero else {},
            "graph": self.graph_id,
            "is_hetero": bool(meta.get("is_hetero", False)),
            "format_version": meta.get("format_version"),
            "partitioner": meta.get("partitioner"),
            "host": self._host,
            "max_reply_bytes": self.max_reply_bytes,
            "forwarding": self.forwarder.available,
            # Where the part's files lie, for a trainer on this host that
            # maps them (pyg_dist.connect(colocate=True)).
            "root": str(self.reader.root.resolve()),
        }
        if hetero:
            result["node_types"] = [
                {"name": t, "num_nodes": self._type_nodes[t],
                 "features": self._nodes.type_features(t)}
                for t in self.reader.node_types]
            result["edge_types"] = [
                {"type": list(t), "num_edges": self.reader.num_edges_of(t),
                 "features": self._edges.features(t)}
                for t in self.reader.edge_types]
        return result, list(self._books)

    def sample_bytes(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """Memory ``sample`` needs while it runs, summed over its edge types
        (several are checked against the reply limit as a whole).

        Raises:
            ProtocolError: if the answer would exceed the reply limit, or
                the request is malformed.
            StoreError: if a seed is not owned by this part.
        """
        per_type = [self._type_sample_bytes(sub_args, sub_tensors)
                    for sub_args, sub_tensors in split_typed_request(args, tensors)]
        total = sum(per_type)
        if len(per_type) > 1:  # one type's estimate checked its own answer
            self._check_reply(total // _SAMPLE_WORK_FACTOR, "sample",
                              "use a smaller fan-out or fewer seeds per request")
        return total

    def _type_sample_bytes(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """``sample_bytes`` of one edge type: its answer and the kernel's
        temporaries. From the bound of ``k`` per seed when that is small and
        draws with replacement, else from the seeds' degrees (one gather).

        Raises:
            ProtocolError: if the answer would exceed the reply limit, or
                the request is malformed.
            StoreError: if a seed is not owned by this part.
        """
        csc = self._csc_of(args)
        k, replace = args["num_neighbors"], args.get("replace", False)
        if wants_attributes(args):
            return self._attribute_sample_bytes(args, tensors, csc, k, replace)
        if len(tensors) == 1:
            # The bound from the graph's largest degree spares small
            # requests (the inline ones) the gather.
            n, top = tensors[0].numel(), csc.max_deg
            per_seed = k if replace and k >= 0 else top if k == -1 else min(k, top)
            bound = ops.sample_answer_bytes(n, n * per_seed) * _SAMPLE_WORK_FACTOR
            if not replace and 0 <= k < top:
                bound += _SAMPLE_CANDIDATE_BYTES * n * top
            if bound <= _EXACT_ABOVE:
                return bound
        rows = self._ids(tensors, csc.dst)
        deg = csc.deg.index_select(0, rows)
        work = _SAMPLE_WORK_FACTOR * self._checked_answer(deg, k, replace)
        if not replace and k != -1 and rows.numel() and k < int(deg.max()):
            work += _SAMPLE_CANDIDATE_BYTES * int(deg.sum())
        return work

    def _attribute_sample_bytes(self, args: dict[str, Any], tensors: list[Tensor], csc: Csc,
                                k: int, replace: bool) -> int:
        """``sample_bytes`` by weight or time: the weighted and temporal
        kernels work over every entry of the seeds' segments (a padded
        matrix or narrowed candidates) whatever the fan-out."""
        parse_request(args, tensors)
        rows = self._ids(tensors[:1], csc.dst)
        deg = csc.deg.index_select(0, rows)
        return _SAMPLE_WORK_FACTOR * self._checked_answer(deg, k, replace) + \
            _SAMPLE_CANDIDATE_BYTES * int(deg.sum())

    def _checked_answer(self, deg: Tensor, k: int, replace: bool) -> int:
        """Bytes of the answer for seeds of these degrees, refused over the
        reply limit (:class:`~pyg_dist.errors.ProtocolError`)."""
        answer = ops.sample_answer_bytes(deg.numel(), sampled_count(deg, k, replace))
        self._check_reply(answer, "sample", "use a smaller fan-out or fewer seeds per request")
        return answer

    @uses_context
    def sample(self, args: dict[str, Any], tensors: list[Tensor],
               ctx: Optional[CallContext] = None) -> Result:
        """One hop for owned seeds of one or more edge types
        (:mod:`pyg_dist.server.typed_sample`: ``edge_types``, ``sizes``,
        ``num_neighbors``, ``seed``): per edge type, in the order asked,
        tensors ``counts``, ``neighbours``, ``edge_ids``, written into memory
        the client lent when it did (``ctx``).

        Every edge type is drawn alike: ``num_neighbors`` (``-1``: all),
        ``replace`` (bool), its ``seed`` (int or nil: same seed, same answer);
        optional ``weight_attr`` (an edge attribute to draw by),
        ``time_attr`` (a node or edge time; the second tensor then holds one
        int64 time per seed) and ``temporal_strategy`` (``"uniform"`` or
        ``"last"``), see :mod:`pyg_dist.server.sample_attrs`.
        """
        result: dict[str, Any] = {}
        drawn = []
        for sub_args, sub_tensors in split_typed_request(args, tensors):
            extra, *answer = self._sample_type(sub_args, sub_tensors)
            result.update(extra)
            drawn.append(answer)
        return result, _sample_answer(drawn, ctx)

    def _sample_type(self, args: dict[str, Any], tensors: list[Tensor]
                     ) -> tuple[dict[str, Any], Csc, Tensor, Tensor]:
        """One edge type of a ``sample``: ``(result, csc, counts, positions)``."""
        csc = self._csc_of(args)
        k, replace, seed = args["num_neighbors"], args.get("replace", False), args.get("seed")
        if wants_attributes(args):
            return self._sample_by_attributes(args, tensors, csc, k, replace, seed)
        rows = self._ids(tensors, csc.dst)
        start = csc.colptr.index_select(0, rows)
        deg = csc.deg.index_select(0, rows)
        # k per seed bounds the answer; the exact count costs ops that only
        # a request near the limit needs.
        if k == -1 or ops.sample_answer_bytes(rows.numel(), rows.numel() * k) > \
                self.max_reply_bytes:
            self._checked_answer(deg, k, replace)
        generator = seeded_generator(seed)
        counts, positions = sample_segments(start, deg, k, replace, generator)
        return {}, csc, counts, positions

    def _sample_by_attributes(self, args: dict[str, Any], tensors: list[Tensor], csc: Csc,
                              k: int, replace: bool, seed: Optional[int]
                              ) -> tuple[dict[str, Any], Csc, Tensor, Tensor]:
        request = parse_request(args, tensors)
        rows = self._ids(tensors[:1], csc.dst)
        start = csc.colptr.index_select(0, rows)
        deg = csc.deg.index_select(0, rows)
        self._checked_answer(deg, k, replace)
        generator = seeded_generator(seed)
        edge_type = edge_type_arg(args.get("edge_type"))
        counts, positions = self._attributes.sample(edge_type, request, start, deg, k,
                                                    replace, generator)
        result = {}
        if request.time_attr is not None:
            result["time_kind"] = self._attributes.time(edge_type, request.time_attr)[1]
        return result, csc, counts, positions

    def edge_index_bytes(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """Bytes of ``edge_index``'s answer (three int64 per edge)."""
        csc = self._csc_of(args)
        start, stop = page(args, csc.row.numel())
        answer = 24 * (stop - start)
        self._check_reply(answer, "edge_index", "ask for fewer edges per call ('count')")
        return answer

    def degree(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """In-degrees of the part's nodes for ``edge_type``: tensors
        ``node_ids`` (global, sorted) and ``degree`` (int64), 16 bytes a node."""
        csc = self._csc_of(args)
        return {}, [csc.dst.node_ids, csc.deg]

    def stats(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """What ``get`` served since the server started: ``get_calls``,
        ``get_rows`` and ``get_bytes`` (the rows' bytes, whether they went
        over the socket or into shared memory); ``get_edges_calls``,
        ``get_edges_rows``, ``get_edges_bytes`` the same for ``get_edges``;
        ``sample_tree_calls``, the batches this server coordinated."""
        return {**self._nodes.served(), **self._edges.served(),
                "sample_tree_calls": self.forwarder.trees}, []

    def edge_index(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """The part's edges as tensors ``row`` (source), ``col`` (destination),
        ``edge_ids``, all global, in CSC order; with ``start`` / ``count``
        only those positions of it (pages within the reply limit). The
        result's ``total`` is the part's edge count."""
        csc = self._csc_of(args)
        total = csc.row.numel()
        start, stop = page(args, total)
        self._check_reply(24 * (stop - start), "edge_index",
                          "ask for fewer edges per call ('count')")
        if start == 0 and stop == total:
            col = torch.repeat_interleave(csc.dst.node_ids, csc.deg, output_size=total)
            return {"total": total}, [csc.row, col, csc.edge_ids]
        # The destination of CSC position e is the column whose range holds e.
        positions = torch.arange(start, stop)
        column = torch.searchsorted(csc.colptr, positions, right=True) - 1
        return {"total": total}, [csc.row[start:stop], csc.dst.node_ids[column],
                                  csc.edge_ids[start:stop]]


def _sample_answer(drawn: list[tuple[Csc, Tensor, Tensor]],
                   ctx: Optional[CallContext]) -> list[Tensor]:
    """Per ``(csc, counts, positions)`` of an edge type, ``counts`` and the
    neighbours and edge ids at those CSC positions, gathered straight into
    the memory the client lent for them, if it did (a trainer on this host:
    the answer then crosses no socket), all edge types' at once."""
    if ctx is None or not ctx.lent:
        return [t for csc, counts, positions in drawn
                for t in (counts, csc.row.index_select(0, positions),
                          csc.edge_ids.index_select(0, positions))]
    out = ctx.alloc([spec for csc, counts, positions in drawn
                     for spec in ((counts.dtype, counts.shape),
                                  (csc.row.dtype, (positions.numel(),)),
                                  (csc.edge_ids.dtype, (positions.numel(),)))])
    for i, (csc, counts, positions) in enumerate(drawn):
        out[3 * i].copy_(counts)
        torch.index_select(csc.row, 0, positions, out=out[3 * i + 1])
        torch.index_select(csc.edge_ids, 0, positions, out=out[3 * i + 2])
    return out
