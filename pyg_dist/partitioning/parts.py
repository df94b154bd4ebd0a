"""What a loaded part holds: :class:`NodePart`, :class:`EdgePart` and
:class:`PartData`, keyed by node / edge type (``None`` when homogeneous).
:class:`~pyg_dist.partitioning.reader.PartitionReader` loads them, a whole
part or one type at a time."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import (
    GraphKindMismatchError,
    InvalidPartitionArgumentError,
    PartitionFormatError,
)
from pyg_dist.partitioning.format import EdgeTypeKey, NodeTypeKey


@dataclass
class NodePart:
    """The owned nodes of one node type in one part.

    Args:
        node_ids: Sorted global ids (int64); row ``i`` of every feature
            belongs to ``node_ids[i]`` (its *local row*).
        features: Feature name -> tensor in local row order (``x``, ``y``, masks).
    """

    node_ids: Tensor
    features: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class EdgePart:
    """The incoming edges of one part's owned destination nodes, as CSC.

    Args:
        indptr: ``[num_owned + 1]``; edges of local destination ``i`` are
            ``indptr[i]:indptr[i + 1]``.
        indices: Global source id of every edge (int64).
        edge_ids: Global edge id (column of the input ``edge_index``) of every edge.
        features: Edge feature name -> tensor in CSC order.
    """

    indptr: Tensor
    indices: Tensor
    edge_ids: Tensor
    features: dict[str, Tensor] = field(default_factory=dict)
    _sorted: Optional[tuple[Tensor, Tensor]] = field(default=None, init=False, repr=False,
                                                     compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                  compare=False)

    @property
    def num_edges(self) -> int:
        """Number of stored edges."""
        return int(self.indices.numel())

    def rows(self, edge_ids: Tensor) -> Tensor:
        """The CSC positions of global edge ids stored in this part: where
        their attributes are in :attr:`features` (``features[k][rows(e_id)]``).

        The first call sorts the part's edge ids once (``O(e log e)``); each
        call is then a binary search per id.

        Args:
            edge_ids: Global edge ids of this edge type (any shape, flattened).

        Returns:
            int64 positions, one per id, in the caller's order.

        Raises:
            InvalidPartitionArgumentError: if ``edge_ids`` is not an integer
                tensor, or an id is not stored in this part (edges are stored
                at the part owning their destination).
        """
        if not isinstance(edge_ids, Tensor) or edge_ids.is_floating_point() \
                or edge_ids.dtype == torch.bool:
            raise InvalidPartitionArgumentError("edge ids must be an integer tensor")
        ids = edge_ids.reshape(-1).to(torch.int64)
        with self._lock:
            if self._sorted is None:
                self._sorted = torch.sort(self.edge_ids)
        values, order = self._sorted
        if not ids.numel():
            return ids
        pos = torch.searchsorted(values, ids).clamp_(max=max(values.numel() - 1, 0))
        found = values[pos] == ids if values.numel() else torch.zeros_like(ids, dtype=torch.bool)
        if not bool(found.all()):
            missing = ids[~found]
            raise InvalidPartitionArgumentError(
                f"{missing.numel()} of {ids.numel()} edge ids are not stored in this part "
                f"(e.g. {int(missing[0])}); an edge is stored at the part that owns its "
                f"destination")
        return order[pos]


@dataclass
class PartData:
    """Everything one part holds, keyed by node / edge type (``None`` for a
    homogeneous graph). The properties give the homogeneous view directly.

    Args:
        part: The part's index.
        num_parts: Number of parts of the dataset.
        nodes: Node type -> :class:`NodePart`.
        edges: Edge type -> :class:`EdgePart` (empty if topology was not loaded).
    """

    part: int
    num_parts: int
    nodes: dict[NodeTypeKey, NodePart]
    edges: dict[EdgeTypeKey, EdgePart]

    @property
    def is_hetero(self) -> bool:
        """Whether the part belongs to a heterogeneous graph (named types)."""
        return None not in self.nodes

    def _only(self, table: dict, what: str) -> Any:
        if self.is_hetero:
            raise GraphKindMismatchError(
                f"part {self.part} is of a heterogeneous graph: it has no single {what}; "
                f"index .nodes by node type and .edges by (src, rel, dst)")
        if None not in table:
            raise PartitionFormatError(
                f"part {self.part} was loaded without its {what} (topology=False or "
                f"features=False); load it with them")
        return table[None]

    @property
    def node_ids(self) -> Tensor:
        """Sorted owned global ids (homogeneous graph)."""
        return self._only(self.nodes, "nodes").node_ids

    @property
    def node_features(self) -> dict[str, Tensor]:
        """Node features in local row order (homogeneous graph)."""
        return self._only(self.nodes, "nodes").features

    @property
    def indptr(self) -> Tensor:
        """CSC pointer over owned destinations (homogeneous graph)."""
        return self._only(self.edges, "edges").indptr

    @property
    def indices(self) -> Tensor:
        """Global source ids of the owned nodes' incoming edges (homogeneous graph)."""
        return self._only(self.edges, "edges").indices

    @property
    def edge_ids(self) -> Tensor:
        """Global edge ids, aligned with :attr:`indices` (homogeneous graph)."""
        return self._only(self.edges, "edges").edge_ids

    @property
    def edge_features(self) -> dict[str, Tensor]:
        """Edge features in CSC order (homogeneous graph)."""
        return self._only(self.edges, "edges").features

    @property
    def num_nodes(self) -> int:
        """Owned nodes over all node types."""
        return sum(int(n.node_ids.numel()) for n in self.nodes.values())

    @property
    def num_edges(self) -> int:
        """Stored edges over all edge types."""
        return sum(int(e.indices.numel()) for e in self.edges.values())
