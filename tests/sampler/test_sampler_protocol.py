"""The loader's sampler protocol: seeded samplers by what they do, not their class."""

from __future__ import annotations

from typing import Any, Optional

import pytest
import torch
from torch_geometric.sampler import BaseSampler, NeighborSampler, NodeSamplerInput

from pyg_dist.errors import LoaderError
from pyg_dist.loader import DistNeighborLoader
from pyg_dist.sampler import DistNeighborSampler, SeededSampler


class DelegatingSampler(BaseSampler):
    """A third-party sampler: not a DistNeighborSampler, but seeded."""

    def __init__(self, inner: DistNeighborSampler) -> None:
        self.inner = inner
        self.seeds: list[Optional[int]] = []

    def draw_seed(self) -> int:
        return self.inner.draw_seed()

    def sample_from_nodes(self, index: NodeSamplerInput, seed: Optional[int] = None,
                          **kwargs: Any):
        self.seeds.append(seed)
        return self.inner.sample_from_nodes(index, seed=seed)

    def sample_from_edges(self, index, neg_sampling=None):
        return self.inner.sample_from_edges(index, neg_sampling)

    @property
    def edge_permutation(self) -> None:
        return None


def test_dist_neighbor_sampler_is_a_pyg_sampler_and_a_seeded_one(cora_stores3):
    sampler = DistNeighborSampler(cora_stores3, num_neighbors=[2])
    assert isinstance(sampler, BaseSampler) and isinstance(sampler, SeededSampler)
    assert not isinstance(object(), SeededSampler)


@pytest.mark.parametrize("prefetch", [0, 3])
def test_a_seeded_sampler_of_another_class_gets_the_loaders_seeds(cora_stores3, prefetch):
    def batches(sampler) -> list:
        return list(DistNeighborLoader(cora_stores3, neighbor_sampler=sampler,
                                       input_nodes=torch.arange(0, 2708, 30), batch_size=16,
                                       prefetch=prefetch))

    wrapped = DelegatingSampler(DistNeighborSampler(cora_stores3, num_neighbors=[4, 3],
                                                    seed=9))
    theirs = batches(wrapped)
    assert len(wrapped.seeds) == len(theirs) == 6
    assert None not in wrapped.seeds  # drawn by the loader, in batch order
    ours = batches(DistNeighborSampler(cora_stores3, num_neighbors=[4, 3], seed=9))
    for a, b in zip(theirs, ours, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_an_unseeded_pyg_sampler_works_in_the_loader(cora_data, cora_stores3, prefetch):
    sampler = NeighborSampler(cora_stores3, num_neighbors=[3, 2])
    assert not isinstance(sampler, SeededSampler)
    with pytest.raises(LoaderError, match="differs"):  # PyG keeps its list in NumNeighbors
        DistNeighborLoader(cora_stores3, [1], neighbor_sampler=sampler)
    DistNeighborLoader(cora_stores3, [3, 2], neighbor_sampler=sampler)
    loader = DistNeighborLoader(cora_stores3, neighbor_sampler=sampler,
                                input_nodes=cora_data.val_mask, batch_size=100,
                                prefetch=prefetch)
    batches = list(loader)
    assert [b.batch_size for b in batches] == [100, 100, 100, 100, 100]
    for batch in batches:
        assert torch.equal(batch.x, cora_data.x[batch.n_id])
        src, dst = cora_data.edge_index[:, batch.e_id]
        assert torch.equal(batch.n_id[batch.edge_index[0]], src)
        assert torch.equal(batch.n_id[batch.edge_index[1]], dst)
