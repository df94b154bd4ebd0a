"""``frequency``: cache the nodes sampling visits most.

Runs the loader's sampler over the training seeds for some epochs without
fetching a single feature, counts how often each node appears in a batch,
and keeps the most visited (GraphLearn-for-PyTorch's and SALIENT++'s
policy). It costs one sampling pass per epoch counted; the seconds and
batches are recorded in the cache's report.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist.errors import CacheError
from pyg_dist.store.cache_policy import CacheContext, top_by_score


def frequency_policy(context: CacheContext, budget: int, *,
                     num_neighbors: Optional[Sequence[int]] = None,
                     input_nodes: Optional[Any] = None, batch_size: int = 512,
                     epochs: int = 1, seed: int = 0) -> Tensor:
    """The ``budget`` nodes visited most by sampling from ``input_nodes``.

    Args:
        context: Needs the graph store.
        budget: How many nodes the cache holds.
        num_neighbors: The loader's fan-out per hop (required: the visits
            depend on it).
        input_nodes: The training seeds (ids or a boolean mask); ``None``:
            every node.
        batch_size: Seeds per sampled batch.
        epochs: Shuffled passes over the seeds to count.
        seed: Seed of the shuffles and of the sampler.
    """
    from pyg_dist.sampler.dist_neighbor_sampler import DistNeighborSampler

    graph_store = context.require_graph_store("frequency")
    if num_neighbors is None:
        raise CacheError("cache policy 'frequency' needs num_neighbors (the loader's fan-out), "
                         "e.g. policy_options={'num_neighbors': [10, 5], 'input_nodes': "
                         "train_mask}")
    if not isinstance(batch_size, int) or batch_size < 1 or not isinstance(epochs, int) \
            or epochs < 1:
        raise CacheError(f"cache policy 'frequency' needs batch_size >= 1 and epochs >= 1, "
                         f"got {batch_size!r} and {epochs!r}")
    seeds = _seed_ids(input_nodes, context.num_nodes)
    sampler = DistNeighborSampler((context.feature_store, graph_store),
                                  num_neighbors=list(num_neighbors), seed=seed)
    generator = torch.Generator().manual_seed(seed)
    visits = torch.zeros(context.num_nodes, dtype=torch.long)
    batches = 0
    start = time.perf_counter()
    for _ in range(epochs):
        order = seeds[torch.randperm(seeds.numel(), generator=generator)]
        for chunk in order.split(batch_size):
            out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=chunk))
            visits.index_add_(0, out.node, torch.ones_like(out.node))
            batches += 1
    context.report.update(frequency_seconds=round(time.perf_counter() - start, 3),
                          frequency_batches=batches, frequency_epochs=epochs)
    return top_by_score(visits, budget)


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
