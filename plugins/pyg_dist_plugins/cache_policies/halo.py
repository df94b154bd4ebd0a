"""``halo``: cache the remote neighbours of the part served on this host.

A trainer placed beside the server of part K reads K's rows through shared
memory at no network cost; what crosses the network are the rows of other
parts' nodes that K's nodes link to (K's *halo*). This policy caches those,
the most linked first. It asks K's server for its edges once. On a
heterogeneous graph, a node type's halo is counted over the edge types
leaving it (their sources outside K, linked to K's nodes).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from pyg_dist.errors import CacheError
from pyg_dist.store.cache_policy import CacheContext, top_by_score


def halo_policy(context: CacheContext, budget: int, *, part: Optional[int] = None) -> Tensor:
    """The ``budget`` nodes of other parts most linked to from ``part``.

    Args:
        context: Needs the graph store.
        budget: How many nodes the cache holds.
        part: The trainer's co-located part; ``None``: the one part whose
            server runs on this host (an error if none or several do).
    """
    graph_store = context.require_graph_store("halo")
    if part is None:
        local = context.feature_store.local_parts()
        if len(local) != 1:
            raise CacheError(f"cache policy 'halo' needs the trainer's part: "
                             f"{len(local)} servers run on this host ({local}); pass "
                             f"policy_options={{'part': K}}")
        part = local[0]
    edge_types = [None] if context.group is None else \
        [t for t in graph_store.edge_types if t[0] == context.group]
    book = graph_store.router.book_of(context.group)
    links = torch.zeros(context.num_nodes, dtype=torch.long)
    for edge_type in edge_types:
        src = graph_store.part_edge_index(part, edge_type)[0]
        remote = src[book.part_of(src).to(torch.long) != int(part)]
        links += torch.bincount(remote, minlength=context.num_nodes)
    context.report.update(halo_part=int(part), halo_nodes=int((links > 0).sum()))
    return top_by_score(links, budget)
