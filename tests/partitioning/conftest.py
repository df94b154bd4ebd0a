"""Fixtures for the partitioning tests: real graphs and a reassembler that
rebuilds a graph from the parts on disk."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from pyg_dist.datasets import cora, fake
from pyg_dist.partitioning import PartitionReader


@pytest.fixture(scope="session")
def cora_graph() -> Data:
    return cora()


@pytest.fixture(scope="session")
def fake_graph() -> Data:
    # Directed, with an edge feature, so edge order and edge features are exercised.
    return fake(num_nodes=600, avg_degree=6, num_channels=8, num_classes=4,
                is_undirected=False, edge_dim=3, seed=1)


def reassemble(reader: PartitionReader, mmap: bool = False) -> tuple[Data, list[torch.Tensor]]:
    """Rebuilds the whole graph from its parts, in global id / edge id order.

    Checks on the way that every node is owned by exactly one part and every
    edge is stored exactly once, at the owner of its destination.

    Returns:
        The graph, and the owned ids of every part.
    """
    n, e = reader.num_nodes, reader.num_edges
    owner = torch.full((n,), -1, dtype=torch.int64)
    stored_edge = torch.zeros(e, dtype=torch.int64)
    edge_index = torch.full((2, e), -1, dtype=torch.int64)
    node_feats: dict[str, torch.Tensor] = {}
    edge_feats: dict[str, torch.Tensor] = {}
    owned = []
    for k in range(reader.num_parts):
        part = reader.load_part(k, mmap=mmap)
        ids = part.node_ids
        assert ids.dtype == torch.int64
        assert bool((ids[1:] > ids[:-1]).all()), "node_ids must be sorted and unique"
        assert bool((owner[ids] == -1).all()), "a node is owned by two parts"
        owner[ids] = k
        owned.append(ids)
        assert part.indptr.numel() == ids.numel() + 1
        dst = torch.repeat_interleave(ids, part.indptr[1:] - part.indptr[:-1])
        stored_edge.index_add_(0, part.edge_ids, torch.ones_like(part.edge_ids))
        edge_index[0, part.edge_ids] = part.indices
        edge_index[1, part.edge_ids] = dst
        for name, value in part.node_features.items():
            node_feats.setdefault(name, torch.empty((n, *value.shape[1:]), dtype=value.dtype))
            node_feats[name][ids] = value
        for name, value in part.edge_features.items():
            edge_feats.setdefault(name, torch.empty((e, *value.shape[1:]), dtype=value.dtype))
            edge_feats[name][part.edge_ids] = value
    assert bool((owner >= 0).all()), "a node is owned by no part"
    assert bool((stored_edge == 1).all()), "an edge is stored zero or several times"
    assert torch.equal(owner, reader.book.part_of(torch.arange(n)))
    return Data(edge_index=edge_index, num_nodes=n, **node_feats, **edge_feats), owned


@pytest.fixture
def reassembled():
    """The :func:`reassemble` helper, as a fixture (conftest modules are not importable)."""
    return reassemble
