"""Edge attributes by global edge id: the ``get_edges`` and ``edge_ids`` ops.

A part stores the incoming edges of the nodes it owns, and their attributes
(``edge_attr``, ``edge_weight``, ...) beside them in its edge files, in the
file's CSC order. :class:`EdgeFeatureOps` serves them by *global* edge id:

* ``get_edges`` (args ``edge_type``, ``attrs``; tensor: 1-D int64 edge ids
  stored by this part) answers one tensor per attribute, rows in the order
  of the ids, written into the outputs its call context allocates (shared
  memory the client lent, when it did), like ``get`` does for nodes;
* ``edge_ids`` (args ``edge_type``, ``start``, ``count``) answers the part's
  global edge ids, sorted, a page of them: a trainer builds the owner of
  every edge from all parts' answers once (``pyg_dist.store.edge_fetch``).

It is an op of its own, not ``get`` with an edge type: a homogeneous graph's
node features and edge features would both be group nil there.

Each edge type's lookup (global edge id -> position in the part's file) is
built on first use and kept: the file's edge ids sorted once, then a dense
table over all edge ids of the type (4 bytes an edge, up to
:data:`EDGE_TABLE_MAX` edges) or a binary search per id
(:class:`~pyg_dist.server.requests.LocalIndex`). The attributes are
memory-mapped from the part's file (pages read as rows are asked for).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.errors import StoreError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.protocol import ops
from pyg_dist.rpc.context import CallContext, uses_context
from pyg_dist.rpc.wire_format import DTYPES
from pyg_dist.rpc.wire_values import describe
from pyg_dist.server.requests import (
    LocalIndex,
    attrs_arg,
    edge_type_arg,
    page,
)

Result = tuple[dict[str, Any], list[Tensor]]

# A dense global-id table costs 4 bytes per edge of the type on every server
# that answers for it; edges outnumber nodes, so the bound is lower than
# the node tables' (64 MiB, against a binary search per id above it).
EDGE_TABLE_MAX = 1 << 24


@dataclass(frozen=True)
class EdgeTable:
    """One edge type of one part, ready to answer by global edge id.

    Args:
        sorted_ids: The part's global edge ids of the type, sorted (int64).
        index: Global edge id -> position in the part's file.
        features: Name -> tensor in the file's order (one row per edge).
    """

    sorted_ids: Tensor
    index: LocalIndex
    features: dict[str, Tensor]


class EdgeFeatureOps:
    """The edge attribute ops of one part.

    Args:
        reader: The dataset (edge feature specs, the part's edge files).
        part: The part served.
        edge_types: The edge types this part serves (``[None]`` for a
            homogeneous graph).
        check_reply: ``check_reply(nbytes, op, hint)`` raises
            :class:`~pyg_dist.errors.ProtocolError` over the reply limit.
    """

    def __init__(self, reader: PartitionReader, part: int, edge_types: list[Any],
                 check_reply: Any) -> None:
        self.reader = reader
        self.part = part
        self._edge_types = list(edge_types)
        self._check_reply = check_reply
        self._num_edges = {t: reader.num_edges_of(t) for t in reader.edge_types}
        self._specs = {t: dict(reader.edge_feature_specs(t)) for t in reader.edge_types}
        # Edges of each type stored by this part (edge_ids' estimate).
        self._stored = {_from_json(e["type"]): int(e["num_edges"])
                        for e in reader.meta["parts"][part]["edge_types"]}
        self._tables: dict[Any, EdgeTable] = {}
        self._lock = threading.Lock()  # worker threads: load each type once
        self._served_lock = threading.Lock()
        self._served = {"get_edges_calls": 0, "get_edges_rows": 0, "get_edges_bytes": 0}

    def handlers(self) -> dict[str, Any]:
        return {ops.GET_EDGES.name: self.get_edges, ops.EDGE_IDS.name: self.edge_ids}

    def estimators(self) -> dict[str, Any]:
        return {ops.GET_EDGES.name: self.get_edges_bytes, ops.EDGE_IDS.name: self.edge_ids_bytes}

    def served(self) -> dict[str, int]:
        """What ``get_edges`` served: calls, rows and their bytes."""
        with self._served_lock:
            return dict(self._served)

    # meta ##################################################################

    def features(self, edge_type: Any) -> dict[str, dict[str, Any]]:
        """``{name: {dtype, shape (per row), size (whole graph)}}`` of an
        edge type's attributes, as ``meta`` reports them."""
        size = self._num_edges[edge_type]
        return {name: {**spec, "size": [size, *spec["shape"]]}
                for name, spec in self._specs[edge_type].items()}

    # Checks ################################################################

    def _edge_type(self, args: dict[str, Any]) -> Any:
        edge_type = edge_type_arg(args.get("edge_type"))
        if edge_type not in self._edge_types:
            raise StoreError(
                f"part {self.part} holds no edge type "
                f"{describe(ops.wire_edge_type(edge_type))}; it holds "
                f"{[ops.wire_edge_type(t) for t in self._edge_types]}")
        return edge_type

    def _plan(self, args: dict[str, Any]) -> tuple[Any, list[str], int]:
        """Checks ``get_edges``'s arguments: ``(edge_type, attrs, bytes per row)``."""
        edge_type = self._edge_type(args)
        attrs, row_bytes = attrs_arg(args, self._specs[edge_type], "edge attribute",
                                     f"edge type {describe(ops.wire_edge_type(edge_type))}")
        return edge_type, attrs, row_bytes

    def _table(self, edge_type: Any) -> EdgeTable:
        table = self._tables.get(edge_type)
        if table is not None:
            return table
        with self._lock:
            table = self._tables.get(edge_type)
            if table is None:
                table = self._load(edge_type)
                self._tables[edge_type] = table
        return table

    def _load(self, edge_type: Any) -> EdgeTable:
        edges = self.reader.load_edges(edge_type, self.part, mmap=True)
        file_ids = edges.edge_ids
        if file_ids.numel() < 2 or bool((file_ids[1:] > file_ids[:-1]).all()):
            sorted_ids, positions = file_ids, None
        else:
            sorted_ids, positions = torch.sort(file_ids)
        index = LocalIndex(sorted_ids, self._num_edges[edge_type], self.part,
                           values=positions, what="edge", table_max=EDGE_TABLE_MAX)
        return EdgeTable(sorted_ids, index, edges.features)

    # Operations ############################################################

    def get_edges_bytes(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """Bytes of ``get_edges``'s answer (rows times the attributes' row bytes).

        Raises:
            ProtocolError: if the answer would exceed the reply limit, or
                the arguments are malformed.
            StoreError: on an edge type or attribute this part does not hold.
        """
        answer = tensors[0].numel() * self._plan(args)[2]
        self._check_reply(answer, "get_edges", "ask for fewer edge ids per request")
        return answer

    @uses_context
    def get_edges(self, args: dict[str, Any], tensors: list[Tensor],
                  ctx: CallContext) -> Result:
        """Rows of edge attributes ``attrs`` of ``edge_type`` (nil when
        homogeneous) for the global edge ids, which this part must store,
        one tensor per attribute, in the order of the ids; result
        ``{"attrs": [...]}``."""
        edge_type, attrs, row_bytes = self._plan(args)
        ids = tensors[0]
        table = self._table(edge_type)
        rows = table.index.rows(ids, self._num_edges[edge_type])
        self._check_reply(rows.numel() * row_bytes, "get_edges",
                          "ask for fewer edge ids per request")
        with self._served_lock:
            self._served["get_edges_calls"] += 1
            self._served["get_edges_rows"] += rows.numel()
            self._served["get_edges_bytes"] += rows.numel() * row_bytes
        specs = self._specs[edge_type]
        outs = ctx.alloc([(DTYPES[specs[a]["dtype"]], (rows.numel(), *specs[a]["shape"]))
                          for a in attrs])
        for name, out in zip(attrs, outs):
            whole = table.features[name]
            if whole.dtype != out.dtype or tuple(whole.shape[1:]) != tuple(out.shape[1:]):
                raise StoreError(f"part {self.part}'s file holds edge attribute {name!r} as "
                                 f"{whole.dtype} rows of shape {list(whole.shape[1:])}, not "
                                 f"as meta.json says")
            torch.index_select(whole, 0, rows, out=out)
        return {"attrs": attrs}, outs

    def edge_ids_bytes(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """Bytes of ``edge_ids``'s answer (one int64 per edge of the page)."""
        edge_type = self._edge_type(args)
        start, stop = page(args, self._stored.get(edge_type, 0))
        answer = 8 * (stop - start)
        self._check_reply(answer, "edge_ids", "ask for fewer ids per call ('count')")
        return answer

    def edge_ids(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """The part's global edge ids of ``edge_type`` (nil when
        homogeneous), sorted (int64), positions ``[start, start + count)``
        of them; result ``total``: how many the part stores."""
        table = self._table(self._edge_type(args))
        total = table.sorted_ids.numel()
        start, stop = page(args, total)
        self._check_reply(8 * (stop - start), "edge_ids",
                          "ask for fewer ids per call ('count')")
        return {"total": total}, [table.sorted_ids[start:stop]]


def _from_json(json_type: Any) -> Any:
    return None if json_type is None else tuple(json_type)
