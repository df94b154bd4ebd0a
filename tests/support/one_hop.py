"""One hop of one edge type through the trainer's public per-hop function.

:meth:`~pyg_dist.store.remote_graph_store.RemoteGraphStore.sample_hop` is
what the hop loop calls; tests of a single hop (weighted draws, lent memory,
a lying server) call it for one frontier.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from pyg_dist.hops.settings import HopSettings


def one_hop(gs: Any, ids: Tensor, num_neighbors: int, replace: bool, seed: int,
            **settings: Any) -> tuple[Tensor, Tensor, Tensor]:
    """``(counts, neighbours, edge_ids)`` of ``ids`` (a homogeneous graph's
    nodes), ``settings`` as :class:`~pyg_dist.hops.settings.HopSettings`'."""
    hop = HopSettings(replace=replace, **settings)
    return gs.sample_hop([(None, ids, None)], num_neighbors, seed, hop)[0]
