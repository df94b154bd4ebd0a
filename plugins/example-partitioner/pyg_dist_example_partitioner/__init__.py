"""Example pyg-dist partitioner plugin: contiguous id ranges.

Registered in ``pyproject.toml`` as ``ranges`` in the
``pyg_dist.partitioners`` entry-point group. Useful when node ids already
follow locality (a graph ordered by crawl, by time or by a previous
clustering); mostly, it is a template to copy.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning import PartitionInput

__all__ = ["RangePartitioner"]


class RangePartitioner:
    """Gives part ``k`` the ``k``-th contiguous range of node ids.

    Args:
        balance: ``"nodes"``: ranges of (almost) equal node counts;
            ``"edges"``: ranges of (almost) equal total degree, so parts carry
            similar numbers of edges.
    """

    def __init__(self, balance: str = "nodes") -> None:
        if balance not in ("nodes", "edges"):
            raise InvalidPartitionArgumentError(
                f"ranges: balance must be 'nodes' or 'edges', got {balance!r}")
        self.balance = balance

    def options(self) -> dict[str, Any]:
        """The options recorded in ``meta.json``."""
        return {"balance": self.balance}

    def assign(self, graph: PartitionInput, num_parts: int) -> Tensor:
        """Returns one part id per node (int64, ranges ascending)."""
        n = graph.num_nodes
        if self.balance == "nodes":
            return torch.arange(n) * num_parts // n
        # Cut the cumulative work (degree + 1, so isolated nodes count) into
        # num_parts equal slices.
        work = torch.cumsum(graph.degree() + 1, 0)
        bounds = work[-1] * torch.arange(1, num_parts) // num_parts
        return torch.searchsorted(bounds, work, right=False).clamp_(max=num_parts - 1)
