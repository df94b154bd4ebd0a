"""Validating a user's ``HeteroData`` and sorting its attributes per type,
and the homogeneous view a partitioner plugin sees.

Node ids are per node type, as in PyG. Partitioners keep their contract over
one homogeneous graph: the node types' nodes concatenated in
:attr:`HeteroGraphParts.node_types` order (node ``i`` of the ``t``-th type is
view node ``offset[t] + i``) and every edge type's edges shifted alike, with
:attr:`~pyg_dist.partitioning.graph.PartitionInput.node_type` telling the
types apart (PyG's ``HeteroData.to_homogeneous`` numbering).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.format import (
    RESERVED_EDGE_NAMES,
    RESERVED_NODE_NAMES,
    type_name_problem,
)
from pyg_dist.partitioning.graph import PartitionInput
from pyg_dist.partitioning.inputs import check_edge_index

logger = logging.getLogger(__name__)

EdgeType = tuple[str, str, str]


@dataclass
class HeteroGraphParts:
    """A validated heterogeneous graph, ready to be cut.

    Args:
        num_nodes: Node type -> number of nodes, in the graph's order.
        edge_index: Edge type -> ``[2, E_t]`` integer edges, sources in
            ``[0, num_nodes[src])``, destinations in ``[0, num_nodes[dst])``.
        node_features: Node type -> node-level tensors of that type.
        edge_features: Edge type -> edge-level tensors of that type.
    """

    num_nodes: dict[str, int]
    edge_index: dict[EdgeType, Tensor]
    node_features: dict[str, dict[str, Tensor]] = field(default_factory=dict)
    edge_features: dict[EdgeType, dict[str, Tensor]] = field(default_factory=dict)

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

    @property
    def total_edges(self) -> int:
        """Edges over all edge types."""
        return sum(int(e.size(1)) for e in self.edge_index.values())

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
        counts = torch.tensor(list(self.num_nodes.values()), dtype=torch.int64)
        node_type = torch.repeat_interleave(torch.arange(len(counts)), counts)
        return PartitionInput(self.total_nodes, edge_index, train_mask=train_mask,
                              node_type=node_type, node_types=self.node_types)


def is_hetero_data(data: Any) -> bool:
    """Whether ``data`` is a PyG ``HeteroData``."""
    from torch_geometric.data import HeteroData

    return isinstance(data, HeteroData)


def split_hetero_attributes(data: Any) -> HeteroGraphParts:
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
    return HeteroGraphParts(num_nodes, edge_index, node_features, edge_features)


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

