"""Small graphs with edge attributes of several dtypes and shapes, for the
edge attribute tests (``get_edges``, ``edge_ids``, ``EdgeFeatureFetcher``)."""

from __future__ import annotations

import torch
from torch_geometric.data import Data, HeteroData

from pyg_dist.datasets import fake, fake_hetero

# An edge type of the hetero graph left without attributes.
BARE = 0


def homo_graph(seed: int = 1) -> Data:
    """~400 nodes, ~4k edges; ``edge_attr`` [E, 4] float32, ``edge_weight``
    [E] float32, ``edge_time`` [E] int64."""
    data = fake(num_nodes=400, avg_degree=5.0, num_channels=8, edge_dim=4, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    num_edges = data.edge_index.size(1)
    data.edge_weight = torch.rand(num_edges, generator=generator)
    data.edge_time = torch.randint(0, 1 << 40, (num_edges,), generator=generator)
    return data


def hetero_graph(seed: int = 3) -> HeteroData:
    """``fake_hetero``: every edge type but the first gets ``edge_attr``
    [E, 3] float64 (its values encode the edge type and id), every other
    one ``edge_weight`` [E] float32 too."""
    data = fake_hetero(num_nodes=200, avg_degree=3.0, num_channels=8, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    for k, edge_type in enumerate(data.edge_types):
        if k == BARE:
            continue
        num_edges = data[edge_type].edge_index.size(1)
        attr = torch.randn(num_edges, 3, generator=generator, dtype=torch.float64)
        attr[:, 0] = k * 1_000_000 + torch.arange(num_edges)
        data[edge_type].edge_attr = attr
        if k % 2:
            data[edge_type].edge_weight = torch.rand(num_edges, generator=generator)
    return data
