"""Validating a user's graph and sorting its attributes into node-level and
edge-level tensors per type before anything is written, and the
homogeneous view a partitioner plugin sees.

A homogeneous ``Data`` is the one-type case (node and edge type ``None``).
Node ids are per node type, as in PyG. Partitioners keep their contract over
one homogeneous graph: the node types' nodes concatenated in
:attr:`GraphParts.node_types` order (node ``i`` of the ``t``-th type is
view node ``offset[t] + i``) and every edge type's edges shifted alike, with
:attr:`~pyg_dist.partitioning.graph.PartitionInput.node_type` telling the
types apart (PyG's ``HeteroData.to_homogeneous`` numbering).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.format import (
    RESERVED_EDGE_NAMES,
    RESERVED_NODE_NAMES,
    type_name_problem,
)
from pyg_dist.partitioning.graph import PartitionInput

logger = logging.getLogger(__name__)

EdgeType = tuple[str, str, str]


@dataclass
class GraphParts:
    """A validated graph, ready to be cut: per node and edge type (a
    homogeneous graph's one of each ``None``) its size and tensors.

    Args:
        num_nodes: Node type -> number of nodes, in the graph's order.
        edge_index: Edge type -> ``[2, E_t]`` integer edges, sources in
            ``[0, num_nodes[src])``, destinations in ``[0, num_nodes[dst])``.
        node_features: Node type -> node-level tensors of that type.
        edge_features: Edge type -> edge-level tensors of that type.
    """

    num_nodes: dict[Optional[str], int]
    edge_index: dict[Optional[EdgeType], Tensor]
    node_features: dict[Optional[str], dict[str, Tensor]] = field(default_factory=dict)
    edge_features: dict[Optional[EdgeType], dict[str, Tensor]] = field(default_factory=dict)

    @property
    def node_types(self) -> list[str]:
        """Node types, in the graph's order."""
        return list(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        """Edge types, in the graph's order."""
        return list(self.edge_index)

    @property
    def total_nodes(self) -> int:
        """Nodes over all node types."""
        return sum(self.num_nodes.values())

    def num_edges(self, edge_type: EdgeType) -> int:
        """Edges of one edge type."""
        return int(self.edge_index[edge_type].size(1))

    def offsets(self) -> dict[str, int]:
        """Node type -> id of its first node in the homogeneous view."""
        out, start = {}, 0
        for node_type, count in self.num_nodes.items():
            out[node_type] = start
            start += count
        return out

    def partition_input(self) -> PartitionInput:
        """The homogeneous view handed to a partitioner plugin (see the module
        doc); ``train_mask`` joins the types' masks where they have one."""
        if self.node_types == [None]:
            return PartitionInput.of_types(self.num_nodes, self.edge_index[None],
                                           self.node_features[None].get("train_mask"))
        offsets = self.offsets()
        shifted = [ei.to(torch.int64) + torch.tensor([[offsets[s]], [offsets[d]]])
                   for (s, _, d), ei in self.edge_index.items()]
        edge_index = torch.cat(shifted, dim=1) if shifted else \
            torch.empty(2, 0, dtype=torch.int64)
        del shifted
        masks = [self.node_features[t].get("train_mask") for t in self.node_types]
        train_mask = None
        if any(m is not None and m.dtype == torch.bool and m.dim() == 1 for m in masks):
            train_mask = torch.cat([
                m if m is not None and m.dtype == torch.bool and m.dim() == 1
                else torch.zeros(self.num_nodes[t], dtype=torch.bool)
                for t, m in zip(self.node_types, masks)])
        return PartitionInput.of_types(self.num_nodes, edge_index, train_mask)


def is_hetero_data(data: Any) -> bool:
    """Whether ``data`` is a PyG ``HeteroData``."""
    from torch_geometric.data import HeteroData

    return isinstance(data, HeteroData)


def split_hetero_attributes(data: Any) -> GraphParts:
    """Checks a ``HeteroData`` and sorts its tensors per node and edge type.

    In a node store, a tensor whose first dimension is the type's number of
    nodes is a node feature; in an edge store, one whose first dimension is
    the type's number of edges is an edge feature. Anything else is skipped
    with a warning.

    Raises:
        InvalidPartitionArgumentError: if the graph has no nodes, a type
            name cannot name a file (see
            :func:`~pyg_dist.partitioning.format.type_name_problem`), a node
            type's size is unknown, an edge type names a missing node type or
            has a malformed or out-of-range ``edge_index``, or an attribute
            uses a reserved name.
    """
    num_nodes: dict[str, int] = {}
    node_features: dict[str, dict[str, Tensor]] = {}
    for node_type in data.node_types:
        _check_name(node_type, f"node type {node_type!r}")
        store = data[node_type]
        count = store.num_nodes
        if count is None:
            raise InvalidPartitionArgumentError(
                f"node type {node_type!r} has no x and no num_nodes; set "
                f"data[{node_type!r}].num_nodes")
        num_nodes[node_type] = int(count)
        node_features[node_type] = _features(store, int(count), f"node type {node_type!r}",
                                             RESERVED_NODE_NAMES, skip=("num_nodes",))
    if not sum(num_nodes.values()):
        raise InvalidPartitionArgumentError(
            "the graph has no nodes; there is nothing to partition")
    folded: dict[str, str] = {}
    for node_type in num_nodes:  # file names must differ on case-blind file systems too
        other = folded.setdefault(node_type.casefold(), node_type)
        if other != node_type:
            raise InvalidPartitionArgumentError(
                f"node types {other!r} and {node_type!r} differ only in case; their files "
                f"would collide on case-insensitive file systems: rename one")
    edge_index: dict[EdgeType, Tensor] = {}
    edge_features: dict[EdgeType, dict[str, Tensor]] = {}
    for edge_type in data.edge_types:
        src, rel, dst = edge_type
        what = f"edge type {edge_type!r}"
        _check_name(rel, what)
        for end in (src, dst):
            if end not in num_nodes:
                raise InvalidPartitionArgumentError(
                    f"{what} names the node type {end!r}, which the graph does not have; "
                    f"set data[{end!r}].num_nodes")
        store = data[edge_type]
        if store.get("edge_index") is None and "adj_t" in store:
            raise InvalidPartitionArgumentError(
                f"{what} holds its topology as adj_t; partition() reads edge_index: set it "
                f"first, e.g. row, col, _ = adj_t.t().coo(); edge_index = "
                f"torch.stack([row, col])")
        ei = check_edge_index(store.get("edge_index"), num_nodes[src], num_nodes[dst], what)
        edge_index[edge_type] = ei
        edge_features[edge_type] = _features(store, int(ei.size(1)), what,
                                             RESERVED_EDGE_NAMES, skip=("edge_index",))
    return GraphParts(num_nodes, edge_index, node_features, edge_features)


def _check_name(name: Any, what: str) -> None:
    problem = type_name_problem(name)
    if problem is not None:
        shown = repr(name)[:80]
        raise InvalidPartitionArgumentError(
            f"{what}: the name {shown} {problem}; type names become file names: rename it")


def _features(store: Any, rows: int, what: str, reserved: frozenset[str],
              skip: tuple[str, ...]) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for key, value in store.items():
        if key in skip:
            continue
        if not isinstance(value, Tensor) or value.dim() == 0 or value.is_sparse \
                or value.size(0) != rows:
            logger.warning("%s: attribute %r is not a dense tensor with one row per "
                           "%s; it is not partitioned", what, key,
                           "edge" if "edge" in what else "node")
            continue
        if key in reserved:
            raise InvalidPartitionArgumentError(
                f"{what}: attribute name {key!r} is reserved by the partition format; "
                f"rename it")
        out[key] = value
    return out


def split_attributes(data: Any) -> GraphParts:
    """Checks ``data`` and sorts its tensors into node and edge features.

    An attribute whose name contains ``edge`` and whose first dimension is
    the number of edges is an edge feature; otherwise one whose first
    dimension is the number of nodes is a node feature. Anything else
    (graph-level values, non-tensors) is skipped with a warning.

    Raises:
        InvalidPartitionArgumentError: if ``data`` is not a homogeneous
            ``Data``, has no nodes, has a malformed or out-of-range
            ``edge_index``, or uses a reserved attribute name.
    """
    from torch_geometric.data import Data

    if not isinstance(data, Data):
        raise InvalidPartitionArgumentError(
            f"partition() takes a torch_geometric Data or HeteroData, got "
            f"{type(data).__name__}")
    if data.edge_index is None and "adj_t" in data:
        raise InvalidPartitionArgumentError(
            "the graph holds its topology as adj_t; partition() reads edge_index: set "
            "it first, e.g. row, col, _ = data.adj_t.t().coo(); "
            "data.edge_index = torch.stack([row, col])")
    num_nodes = data.num_nodes
    if not num_nodes:
        raise InvalidPartitionArgumentError(
            "the graph has no nodes; there is nothing to partition")
    edge_index = check_edge_index(data.edge_index, num_nodes)
    num_edges = edge_index.size(1)
    node_features: dict[str, Tensor] = {}
    edge_features: dict[str, Tensor] = {}
    for key, value in data.items():
        if key in ("edge_index", "num_nodes"):
            continue
        if not isinstance(value, Tensor) or value.dim() == 0 or value.is_sparse:
            logger.warning("attribute %r is not a dense tensor; it is not partitioned", key)
            continue
        if "edge" in key and value.size(0) == num_edges:
            edge_features[key] = value
        elif value.size(0) == num_nodes:
            node_features[key] = value
        elif value.size(0) == num_edges:
            edge_features[key] = value
        else:
            logger.warning("attribute %r (shape %s) is neither node- nor edge-level; "
                           "it is not partitioned", key, tuple(value.shape))
    for kind, features, reserved in (("node", node_features, RESERVED_NODE_NAMES),
                                     ("edge", edge_features, RESERVED_EDGE_NAMES)):
        for name in features:
            if name in reserved:
                raise InvalidPartitionArgumentError(
                    f"{kind} attribute name {name!r} is reserved by the partition format; "
                    f"rename it")
    return GraphParts({None: int(num_nodes)}, {None: edge_index}, {None: node_features},
                      {None: edge_features})


def check_edge_index(edge_index: Any, num_nodes: int, num_dst: Optional[int] = None,
                     what: Optional[str] = None) -> Tensor:
    """Checks an ``edge_index`` and returns it contiguous on the CPU.

    Args:
        edge_index: The user's value (``None``: no edges).
        num_nodes: Number of source nodes (of all nodes when homogeneous).
        num_dst: Number of destination nodes (``None``: ``num_nodes``).
        what: The edge type, for messages (``None``: homogeneous).

    Raises:
        InvalidPartitionArgumentError: if it is not a ``[2, E]`` integer
            tensor or holds ids out of range.
    """
    prefix = f"{what}: " if what else ""
    if edge_index is None:
        return torch.empty(2, 0, dtype=torch.int64)
    if (not isinstance(edge_index, Tensor) or edge_index.dim() != 2
            or edge_index.size(0) != 2 or edge_index.is_floating_point()
            or edge_index.dtype == torch.bool):
        raise InvalidPartitionArgumentError(
            f"{prefix}edge_index must be a [2, num_edges] integer tensor; convert a "
            f"SparseTensor adj_t to edge_index first")
    edge_index = edge_index.cpu().contiguous()
    if num_dst is None:
        if edge_index.numel() and (int(edge_index.min()) < 0
                                   or int(edge_index.max()) >= num_nodes):
            raise InvalidPartitionArgumentError(
                f"edge_index holds ids outside [0, {num_nodes}); fix the graph or set "
                f"num_nodes")
        return edge_index
    for row, (end, count) in enumerate((("source", num_nodes), ("destination", num_dst))):
        ids = edge_index[row]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= count):
            raise InvalidPartitionArgumentError(
                f"{prefix}edge_index holds {end} ids outside [0, {count}) (the {end} node "
                f"type's num_nodes); fix the graph or set num_nodes")
    return edge_index
