"""Validating a user's graph and sorting its attributes into node-level and
edge-level tensors before anything is written."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.format import RESERVED_EDGE_NAMES, RESERVED_NODE_NAMES

logger = logging.getLogger(__name__)


@dataclass
class GraphParts:
    """A validated homogeneous graph, ready to be cut.

    Args:
        num_nodes: Number of nodes (>= 1).
        edge_index: ``[2, E]`` integer edges with ids in ``[0, num_nodes)``.
        node_features: Node-level tensors (first dimension ``num_nodes``).
        edge_features: Edge-level tensors (first dimension ``E``).
    """

    num_nodes: int
    edge_index: Tensor
    node_features: dict[str, Tensor] = field(default_factory=dict)
    edge_features: dict[str, Tensor] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        """Number of directed edges."""
        return int(self.edge_index.size(1))


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
    graph = GraphParts(int(num_nodes), edge_index)
    for key, value in data.items():
        if key in ("edge_index", "num_nodes"):
            continue
        if not isinstance(value, Tensor) or value.dim() == 0 or value.is_sparse:
            logger.warning("attribute %r is not a dense tensor; it is not partitioned", key)
            continue
        if "edge" in key and value.size(0) == num_edges:
            graph.edge_features[key] = value
        elif value.size(0) == num_nodes:
            graph.node_features[key] = value
        elif value.size(0) == num_edges:
            graph.edge_features[key] = value
        else:
            logger.warning("attribute %r (shape %s) is neither node- nor edge-level; "
                           "it is not partitioned", key, tuple(value.shape))
    _check_names(graph)
    return graph


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


def _check_names(graph: GraphParts) -> None:
    for name in graph.node_features:
        if name in RESERVED_NODE_NAMES:
            raise InvalidPartitionArgumentError(
                f"node attribute name {name!r} is reserved by the partition format; rename it")
    for name in graph.edge_features:
        if name in RESERVED_EDGE_NAMES:
            raise InvalidPartitionArgumentError(
                f"edge attribute name {name!r} is reserved by the partition format; rename it")
