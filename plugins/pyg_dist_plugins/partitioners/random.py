"""The ``random`` partitioner: a balanced random assignment.

Every part gets ``num_nodes // num_parts`` or one more node (of every node
type, on a heterogeneous graph). Cheap and a baseline for the edge cut of
smarter partitioners; it ignores the topology.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning import PartitionInput


class RandomPartitioner:
    """Assigns nodes to parts uniformly at random, balanced.

    Args:
        seed: Seed of the permutation; the same seed gives the same parts.
    """

    assigns_across_ranks = True
    """Across the ranks of a torchrun job every rank computes the whole book
    itself (it depends on the seed and the node count only): nothing is
    broadcast."""

    def __init__(self, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidPartitionArgumentError(f"random: seed must be an int, got {seed!r}")
        self.seed = seed

    def assign(self, graph: PartitionInput, num_parts: int) -> Tensor:
        """Returns one part id per node: a random permutation dealt round-robin
        (per node type on a heterogeneous graph, so every type is balanced)."""
        gen = torch.Generator().manual_seed(self.seed)
        node_type = getattr(graph, "node_type", None)
        if node_type is None:
            perm = torch.randperm(graph.num_nodes, generator=gen)
            parts = torch.empty(graph.num_nodes, dtype=torch.int64)
            parts[perm] = torch.arange(graph.num_nodes) % num_parts
            return parts
        parts = torch.empty(graph.num_nodes, dtype=torch.int64)
        # Start each type's deal at another part, so that types smaller than
        # num_parts do not all pile onto part 0.
        start = 0
        for t in range(int(node_type.max()) + 1 if node_type.numel() else 0):
            ids = (node_type == t).nonzero().view(-1)
            perm = ids[torch.randperm(ids.numel(), generator=gen)]
            parts[perm] = (torch.arange(ids.numel()) + start) % num_parts
            start += ids.numel()
        return parts

    def assign_stream(self, stream: Any, num_parts: int) -> Tensor:
        """One part id per node of a graph read from files: the same parts as
        :meth:`assign` for the same seed (dealt per node type when the files
        are laid out by type). Edges are not read; the permutation takes 8
        bytes a node (16 by type)."""
        counts = getattr(stream, "node_type_counts", None)
        node_type = None if counts is None else torch.repeat_interleave(
            torch.arange(len(counts)), torch.tensor(counts, dtype=torch.int64))
        view = PartitionInput(int(stream.num_nodes), torch.empty(2, 0, dtype=torch.int64),
                              node_type=node_type)
        return self.assign(view, num_parts)

    def options(self) -> dict[str, Any]:
        """The options recorded in ``meta.json``."""
        return {"seed": self.seed}
