"""Cutting a graph into parts once every node has an owner.

For part ``k`` the writer keeps the owned nodes (sorted global ids), their
rows of every node feature, and the CSC of their *incoming* edges: sources
stay global ids, so a source owned by another part (a halo node) is named but
not stored. One-hop sampling of an owned node therefore needs no other part.

Everything is vectorised and done one part at a time, so temporaries are the
size of one part's edges rather than the whole graph's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from pyg_dist.partitioning.format import EDGE_IDS, INDICES, INDPTR, NODE_IDS


@dataclass
class GraphSplitter:
    """Prepares the per-graph lookups once, then cuts out one part at a time.

    Args:
        node_part: Owner of every node (compact integer dtype); of every
            destination node when ``src_part`` is given.
        num_parts: Number of parts.
        edge_index: ``[2, E]`` directed edges ``(src, dst)``.
        src_part: Owner of every source node when sources are of another
            node type than destinations (``None``: ``node_part``).
    """

    node_part: Tensor
    num_parts: int
    edge_index: Tensor
    src_part: Optional[Tensor] = None
    _local: Tensor = field(init=False, repr=False)
    _dst_part: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        num_nodes = self.node_part.numel()
        # Local row of every node inside its own part: its rank among the
        # part's sorted ids. int32 halves the lookup table where ids fit.
        index_dtype = torch.int32 if num_nodes < 2**31 else torch.int64
        self._local = torch.empty(num_nodes, dtype=index_dtype)
        for part in range(self.num_parts):
            owned = (self.node_part == part).nonzero().view(-1)
            self._local[owned] = torch.arange(owned.numel(), dtype=index_dtype)
        self._dst_part = self.node_part[self.edge_index[1]]

    def owned(self, part: int) -> Tensor:
        """Sorted global ids owned by ``part`` (int64)."""
        return (self.node_part == part).nonzero().view(-1)

    def topology(self, part: int, num_owned: int) -> dict[str, Tensor]:
        """CSC of the owned nodes' incoming edges.

        Returns:
            ``indptr`` (``[num_owned + 1]``), ``indices`` (global source ids)
            and ``edge_ids`` (global edge ids, i.e. columns of ``edge_index``),
            all int64. Within a destination, edges keep their input order.
        """
        edge_ids = (self._dst_part == part).nonzero().view(-1)
        dst_local = self._local[self.edge_index[1, edge_ids]].to(torch.int64)
        dst_local, order = torch.sort(dst_local, stable=True)
        edge_ids = edge_ids[order]
        del order
        counts = torch.bincount(dst_local, minlength=num_owned)
        del dst_local
        indptr = torch.zeros(num_owned + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=indptr[1:])
        indices = self.edge_index[0, edge_ids].to(torch.int64)
        return {INDPTR: indptr, INDICES: indices, EDGE_IDS: edge_ids}

    def foreign(self, part: int, indices: Tensor) -> Tensor:
        """The sources among ``indices`` that another part owns (with repeats)."""
        owner = self.node_part if self.src_part is None else self.src_part
        return indices[owner[indices] != part]



def node_tensors(owned: Tensor, features: dict[str, Tensor]) -> dict[str, Tensor]:
    """The node file of a part: ``node_ids`` and every feature's owned rows."""
    out = {NODE_IDS: owned}
    for name, value in features.items():
        out[name] = value[owned]
    return out


def edge_tensors(topology: dict[str, Tensor], features: dict[str, Tensor]) -> dict[str, Tensor]:
    """The edge file of a part: its CSC plus every edge feature in CSC order."""
    out = dict(topology)
    for name, value in features.items():
        out[name] = value[topology[EDGE_IDS]]
    return out
