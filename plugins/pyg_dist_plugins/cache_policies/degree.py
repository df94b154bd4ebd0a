"""``degree``: cache the nodes with the most in-edges.

A node's in-degree is what the partition servers store for it (one
``degree`` call per server, 16 bytes a node). On an undirected graph it is
also how many neighbourhoods a node belongs to, so it predicts how often
sampling reaches the node (PaGraph's and Quiver's policy). Costs nothing
beyond that call.
"""

from __future__ import annotations

from torch import Tensor

from pyg_dist.store.cache_policy import CacheContext, top_by_score


def degree_policy(context: CacheContext, budget: int) -> Tensor:
    """The ``budget`` nodes of highest in-degree, highest first.

    Args:
        context: Needs the graph store.
        budget: How many nodes the cache holds.
    """
    graph_store = context.require_graph_store("degree")
    return top_by_score(graph_store.in_degree(), budget)
