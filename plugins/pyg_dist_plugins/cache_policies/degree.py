"""``degree``: cache the nodes with the most out-edges.

Under PyG's edge direction (``edge_index[0]`` the source, ``[1]`` the
destination), sampling a node's neighbours draws among the sources of its
in-edges, so a node is reached by sampling in proportion to how many edges
leave it: its out-degree is what predicts sampling. On an undirected graph
in- and out-degree agree (PaGraph's and Quiver's policy); on a directed one
whose in-hubs and out-hubs differ, ranking by in-degree caches nodes that
sampling rarely asks for. The servers store edges by destination, so the
out-degrees are counted from every part's edges, read once page by page
(:meth:`~pyg_dist.store.remote_graph_store.RemoteGraphStore.out_degree`).
On a heterogeneous graph a node type's score is its out-degree summed over
the edge types leaving it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pyg_dist.store.cache_policy import CacheContext, top_by_score


def degree_policy(context: CacheContext, budget: int) -> Tensor:
    """The ``budget`` nodes of highest out-degree, highest first.

    Args:
        context: Needs the graph store.
        budget: How many nodes the cache holds.
    """
    graph_store = context.require_graph_store("degree")
    if context.group is None:
        return top_by_score(graph_store.out_degree(), budget)
    score = torch.zeros(context.num_nodes, dtype=torch.long)
    for edge_type in graph_store.edge_types:
        if edge_type[0] == context.group:
            score += graph_store.out_degree(edge_type)
    return top_by_score(score, budget)
