"""``frequency``: cache the nodes sampling visits most.

Runs the loader's sampler over the training seeds for some epochs without
fetching a single feature, counts how often each node appears in a batch,
and keeps the most visited (GraphLearn-for-PyTorch's and SALIENT++'s
policy). It costs one sampling pass per epoch counted; the seconds and
batches are recorded in the cache's report.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist.errors import CacheError
from pyg_dist.store.cache_policy import CacheContext, top_by_score


def frequency_policy(context: CacheContext, budget: int, *,
                     num_neighbors: Optional[Any] = None,
                     input_nodes: Optional[Any] = None, batch_size: int = 512,
                     epochs: int = 1, seed: int = 0) -> Tensor:
    """The ``budget`` nodes visited most by sampling from ``input_nodes``.

    On a heterogeneous graph one sampling pass counts the visits of every
    node type (kept in ``context.shared``); each type's call takes its own.

    Args:
        context: Needs the graph store.
        budget: How many nodes the cache holds.
        num_neighbors: The loader's fan-out per hop (required: the visits
            depend on it); a heterogeneous graph also takes
            ``{edge_type: fan-outs}`` as the loader does.
        input_nodes: The training seeds (ids or a boolean mask); ``None``:
            every node. On a heterogeneous graph ``(node_type, ids, mask or
            None)`` or a node type, as the loader takes them.
        batch_size: Seeds per sampled batch.
        epochs: Shuffled passes over the seeds to count.
        seed: Seed of the shuffles and of the sampler.
    """
    graph_store = context.require_graph_store("frequency")
    if num_neighbors is None:
        raise CacheError("cache policy 'frequency' needs num_neighbors (the loader's fan-out), "
                         "e.g. policy_options={'num_neighbors': [10, 5], 'input_nodes': "
                         "train_mask}")
    if not isinstance(batch_size, int) or batch_size < 1 or not isinstance(epochs, int) \
            or epochs < 1:
        raise CacheError(f"cache policy 'frequency' needs batch_size >= 1 and epochs >= 1, "
                         f"got {batch_size!r} and {epochs!r}")
    visits = context.shared.get("frequency_visits")
    if visits is None:
        if context.group is None:
            input_type, seeds = None, _seed_ids(input_nodes, context.num_nodes)
            sizes = {None: context.num_nodes}
        else:
            input_type, seeds = _typed_seeds(input_nodes, graph_store)
            sizes = {t: graph_store.router.num_nodes_of(t) for t in graph_store.node_types}
        fanout = dict(num_neighbors) if isinstance(num_neighbors, dict) else list(num_neighbors)
        visits = _count_visits(context, graph_store, fanout, input_type, seeds, sizes,
                               batch_size, epochs, seed)
        context.shared["frequency_visits"] = visits
    return top_by_score(visits[context.group], budget)


def _count_visits(context: CacheContext, graph_store: Any, num_neighbors: Any,
                  input_type: Optional[str], seeds: Tensor, sizes: dict[Optional[str], int],
                  batch_size: int, epochs: int, seed: int) -> dict[Optional[str], Tensor]:
    """How often sampling from ``seeds`` reaches every node of every type."""
    from pyg_dist.sampler import DistNeighborSampler

    sampler = DistNeighborSampler((context.feature_store, graph_store),
                                  num_neighbors=num_neighbors, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    visits = {t: torch.zeros(n, dtype=torch.long) for t, n in sizes.items()}
    batches = 0
    start = time.perf_counter()
    for _ in range(epochs):
        order = seeds[torch.randperm(seeds.numel(), generator=generator)]
        for chunk in order.split(batch_size):
            out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=chunk,
                                                             input_type=input_type))
            nodes = out.node if isinstance(out.node, dict) else {None: out.node}
            for t, node in nodes.items():
                visits[t].index_add_(0, node, torch.ones_like(node))
            batches += 1
    context.report.update(frequency_seconds=round(time.perf_counter() - start, 3),
                          frequency_batches=batches, frequency_epochs=epochs)
    return visits


def _typed_seeds(input_nodes: Any, graph_store: Any) -> tuple[str, Tensor]:
    """The seed type and ids of a heterogeneous ``input_nodes``."""
    node_type, ids = (input_nodes, None) if isinstance(input_nodes, str) else \
        tuple(input_nodes) if isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 \
        and isinstance(input_nodes[0], str) else (None, None)
    if node_type is None:
        raise CacheError("cache policy 'frequency' on a heterogeneous graph needs the seeds' "
                         "node type: input_nodes=(node_type, ids or mask or None), as the "
                         "loader takes them")
    if node_type not in graph_store.node_types:
        raise CacheError(f"cache policy 'frequency': input_nodes names node type "
                         f"{node_type!r}; the graph has {graph_store.node_types}")
    return node_type, _seed_ids(ids, graph_store.router.num_nodes_of(node_type))


def _seed_ids(input_nodes: Any, num_nodes: int) -> Tensor:
    if input_nodes is None:
        return torch.arange(num_nodes)
    ids = torch.as_tensor(input_nodes)
    if ids.dtype == torch.bool:
        if ids.numel() != num_nodes:
            raise CacheError(f"cache policy 'frequency': a boolean input_nodes mask needs one "
                             f"entry per node ({num_nodes}), got {ids.numel()}")
        return ids.nonzero().view(-1)
    if ids.dim() != 1 or ids.is_floating_point():
        raise CacheError(f"cache policy 'frequency': input_nodes must be 1-D integer ids or a "
                         f"boolean mask, got dtype {ids.dtype} shape {tuple(ids.shape)}")
    ids = ids.long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise CacheError(f"cache policy 'frequency': input_nodes outside [0, {num_nodes})")
    return ids
