"""Heterogeneous DistLinkNeighborLoader on real servers: without negatives at
full fan-out its batches equal PyG's LinkNeighborLoader on the same
HeteroData; binary and triplet negatives are drawn over the endpoint types
and land in the batch with their features."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.sampler import NegativeSampling

from pyg_dist.errors import LoaderError, UnknownTypeError
from pyg_dist.loader import DistLinkNeighborLoader


def global_edges(batch, edge_type) -> set[tuple[int, int, int]]:
    src, _, dst = edge_type
    row, col = batch[edge_type].edge_index
    return set(zip(batch[src].n_id[row].tolist(), batch[dst].n_id[col].tolist(),
                   batch[edge_type].e_id.tolist()))


def labelled_pairs(batch, edge_type) -> list[tuple[int, int]]:
    src, _, dst = edge_type
    index = batch[edge_type].edge_label_index
    return list(zip(batch[src].n_id[index[0]].tolist(), batch[dst].n_id[index[1]].tolist()))


def seed_type(graph):
    """An edge type between two different node types."""
    return next(t for t in graph.edge_types if t[0] != t[-1])


def test_full_fanout_link_batches_equal_pyg(hetero_data, hetero_stores):
    edge_type = seed_type(hetero_data)
    links = hetero_data[edge_type].edge_index[:, ::7]
    ref = LinkNeighborLoader(hetero_data, num_neighbors=[-1, -1],
                             edge_label_index=(edge_type, links), batch_size=32)
    dist = DistLinkNeighborLoader(hetero_stores, num_neighbors=[-1, -1],
                                  edge_label_index=(edge_type, links), batch_size=32)
    assert len(dist) == len(ref)
    for a, b in zip(ref, dist):
        assert torch.equal(b[edge_type].input_id, a[edge_type].input_id)
        assert labelled_pairs(b, edge_type) == labelled_pairs(a, edge_type)
        for node_type in hetero_data.node_types:
            assert set(b[node_type].n_id.tolist()) == set(a[node_type].n_id.tolist())
            order_a, order_b = torch.argsort(a[node_type].n_id), torch.argsort(b[node_type].n_id)
            assert torch.equal(b[node_type].x[order_b], a[node_type].x[order_a])
        for t in hetero_data.edge_types:
            assert global_edges(b, t) == global_edges(a, t), t


def test_binary_negatives_over_the_endpoint_types(hetero_data, hetero_stores):
    edge_type = seed_type(hetero_data)
    src, _, dst = edge_type
    loader = DistLinkNeighborLoader(hetero_stores, num_neighbors=[3, 2],
                                    edge_label_index=edge_type, neg_sampling="binary",
                                    neg_sampling_ratio=2, batch_size=25, seed=3)
    batch = next(iter(loader))
    labels = batch[edge_type].edge_label
    index = batch[edge_type].edge_label_index
    assert index.size(1) == labels.numel() == 25 * 3
    assert int((labels == 0).sum()) == 50 and int((labels == 1).sum()) == 25
    # Every labelled endpoint is in the batch with its own features.
    for row, node_type in zip(index, (src, dst)):
        ids = batch[node_type].n_id[row]
        assert torch.equal(batch[node_type].x[row], hetero_data[node_type].x[ids])
    # Positives are edges of the graph.
    pos = set(zip(*hetero_data[edge_type].edge_index.tolist()))
    pairs = labelled_pairs(batch, edge_type)
    assert all(p in pos for p, y in zip(pairs, labels.tolist()) if y == 1)


def test_triplet_indices_point_into_the_batch(hetero_data, hetero_stores):
    edge_type = seed_type(hetero_data)
    src, _, dst = edge_type
    loader = DistLinkNeighborLoader(hetero_stores, num_neighbors=[2],
                                    edge_label_index=edge_type,
                                    neg_sampling=NegativeSampling("triplet", 3), batch_size=16,
                                    seed=4)
    batch = next(iter(loader))
    assert batch[src].src_index.numel() == 16
    assert batch[dst].dst_neg_index.shape == (16, 3)
    assert int(batch[dst].dst_neg_index.max()) < batch[dst].num_nodes
    links = hetero_data[edge_type].edge_index
    seeds = batch[edge_type].input_id
    assert torch.equal(batch[src].n_id[batch[src].src_index], links[0, seeds])
    assert torch.equal(batch[dst].n_id[batch[dst].dst_pos_index], links[1, seeds])


def test_negative_destinations_are_uniform_over_their_type(hetero_data, hetero_stores):
    """Chi-square of 20,000 negative destinations against uniform over the
    destination type's nodes (p = 0.001)."""
    from scipy.stats import chi2

    edge_type = seed_type(hetero_data)
    dst = edge_type[-1]
    n = hetero_data[dst].num_nodes
    loader = DistLinkNeighborLoader(hetero_stores, num_neighbors=[0],
                                    edge_label_index=edge_type,
                                    neg_sampling=NegativeSampling("triplet", 20),
                                    batch_size=250, seed=9)
    counts = torch.zeros(n)
    drawn = 0
    for batch in loader:
        ids = batch[dst].n_id[batch[dst].dst_neg_index.view(-1)]
        counts += torch.bincount(ids, minlength=n)
        drawn += ids.numel()
        if drawn >= 20_000:
            break
    expected = drawn / n
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert stat < chi2.ppf(0.999, n - 1), stat


def test_bad_link_inputs_are_typed_errors(hetero_data, hetero_stores, cora_stores):
    edge_type = seed_type(hetero_data)
    with pytest.raises(UnknownTypeError, match="edge types are"):
        DistLinkNeighborLoader(hetero_stores, num_neighbors=[2],
                               edge_label_index=(("v0", "nope", "v1"), None))
    too_big = torch.tensor([[0], [hetero_data[edge_type[-1]].num_nodes]])
    with pytest.raises(LoaderError, match="destination ids outside"):
        DistLinkNeighborLoader(hetero_stores, num_neighbors=[2],
                               edge_label_index=(edge_type, too_big))
    with pytest.raises(Exception, match="homogeneous"):
        DistLinkNeighborLoader(cora_stores, num_neighbors=[2],
                               edge_label_index=(edge_type, torch.zeros(2, 1, dtype=torch.long)))


def test_disjoint_hetero_link_batches_give_every_link_its_own_tree(hetero_data,
                                                                    hetero_stores):
    edge_type = seed_type(hetero_data)
    src, _, dst = edge_type
    loader = DistLinkNeighborLoader(hetero_stores, num_neighbors=[3, 2],
                                    edge_label_index=edge_type, neg_sampling="binary",
                                    batch_size=16, disjoint=True, seed=8)
    batch = next(iter(loader))
    index = batch[edge_type].edge_label_index
    assert index.size(1) == 32
    # Link i's endpoints root tree i (negatives: trees 16..31, as in PyG).
    assert torch.equal(batch[src].batch[index[0]] % 16, torch.arange(32) % 16)
    assert torch.equal(batch[dst].batch[index[1]] % 16, torch.arange(32) % 16)
    for t in hetero_data.edge_types:
        row, col = batch[t].edge_index
        assert torch.equal(batch[t[0]].batch[row], batch[t[-1]].batch[col]), t
