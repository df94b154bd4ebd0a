"""``split=False``: whole-graph evaluation under DDP, every rank covering every node.

The default splits input nodes across ranks (each rank evaluates its share,
metrics are reduced); ``split=False`` is the explicit opt-out that used to be
reachable only by passing ``rank=0, world_size=1``.
"""

from __future__ import annotations

import pytest
import torch

from pyg_dist.errors import LoaderError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader


def _inputs(loader) -> torch.Tensor:
    return torch.cat([b.n_id[:b.batch_size] for b in loader])


def test_default_splits_and_split_false_covers_every_node(cora_data, cora_stores3):
    n = cora_data.num_nodes
    kw = dict(num_neighbors=[0], batch_size=512)
    shares = [_inputs(DistNeighborLoader(cora_stores3, rank=r, world_size=2, **kw))
              for r in (0, 1)]
    assert shares[0].numel() == shares[1].numel() == n // 2
    assert torch.equal(torch.cat(shares).sort().values, torch.arange(n))
    for rank in (0, 1):
        whole = DistNeighborLoader(cora_stores3, rank=rank, world_size=2, split=False, **kw)
        assert torch.equal(_inputs(whole), torch.arange(n))  # in order, every node once


def test_split_false_takes_dataloader_sampling_arguments(cora_stores3):
    gen = torch.Generator().manual_seed(0)
    loader = DistNeighborLoader(cora_stores3, num_neighbors=[0], batch_size=512, rank=0,
                                world_size=2, split=False, shuffle=True, generator=gen)
    assert _inputs(loader).sort().values.numel() == 2708
    with pytest.raises(LoaderError, match="split=False"):
        DistNeighborLoader(cora_stores3, num_neighbors=[0], batch_size=512, rank=0,
                           world_size=2, generator=gen)
