"""``degree``: cache the nodes with the most in-edges.

A node's in-degree is what the partition servers store for it (one
``degree`` call per server, 16 bytes a node). On an undirected graph it is
also how many neighbourhoods a node belongs to, so it predicts how often
sampling reaches the node (PaGraph's and Quiver's policy). Costs nothing
beyond that call. On a heterogeneous graph a node type's score is its
in-degree summed over the edge types into it (one call per edge type).
"""

from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.store.cache_policy import CacheContext, top_by_score


def degree_policy(context: CacheContext, budget: int) -> Tensor:
    """The ``budget`` nodes of highest in-degree, highest first.

    Args:
        context: Needs the graph store.
        budget: How many nodes the cache holds.
    """
    graph_store = context.require_graph_store("degree")
    if context.group is None:
        return top_by_score(graph_store.in_degree(), budget)
    score = torch.zeros(context.num_nodes, dtype=torch.long)
    for edge_type in graph_store.edge_types:
        if edge_type[-1] == context.group:
            score += graph_store.in_degree(edge_type)
    return top_by_score(score, budget)
