"""The ``random`` partitioner: a balanced random assignment.

Every part gets ``num_nodes // num_parts`` or one more node. Cheap and a
baseline for the edge cut of smarter partitioners; it ignores the topology.
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

    def __init__(self, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidPartitionArgumentError(f"random: seed must be an int, got {seed!r}")
        self.seed = seed

    def assign(self, graph: PartitionInput, num_parts: int) -> Tensor:
        """Returns one part id per node: a random permutation dealt round-robin."""
        gen = torch.Generator().manual_seed(self.seed)
        perm = torch.randperm(graph.num_nodes, generator=gen)
        parts = torch.empty(graph.num_nodes, dtype=torch.int64)
        parts[perm] = torch.arange(graph.num_nodes) % num_parts
        return parts

    def options(self) -> dict[str, Any]:
        """The options recorded in ``meta.json``."""
        return {"seed": self.seed}
