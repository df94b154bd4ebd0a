"""Full fan-out exactness: DistNeighborLoader equals PyG's NeighborLoader on Cora."""

from __future__ import annotations

import torch
from torch_geometric.loader import NeighborLoader

from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader

# 301 seeds spread over the graph: three full batches and a short last one.
SEEDS = torch.arange(0, 2708, 9)


def global_edges(batch) -> set[tuple[int, int, int]]:
    """``(src, dst, edge id)`` of every edge of a batch, in global ids."""
    src = batch.n_id[batch.edge_index[0]].tolist()
    dst = batch.n_id[batch.edge_index[1]].tolist()
    return set(zip(src, dst, batch.e_id.tolist()))


def by_node(batch, name: str) -> torch.Tensor:
    """Rows of ``batch[name]`` sorted by global node id."""
    return batch[name][torch.argsort(batch.n_id)]


def test_full_fanout_batches_equal_pyg_neighbor_loader(cora_data, cora_stores):
    ref = NeighborLoader(cora_data, num_neighbors=[-1, -1], input_nodes=SEEDS, batch_size=100)
    dist = DistNeighborLoader(cora_stores, num_neighbors=[-1, -1], input_nodes=SEEDS,
                              batch_size=100)
    assert len(dist) == len(ref) == 4
    batches = 0
    for a, b in zip(ref, dist):
        batches += 1
        assert b.batch_size == a.batch_size
        assert torch.equal(b.input_id, a.input_id)
        assert torch.equal(b.n_id[:b.batch_size], a.n_id[:a.batch_size])  # seeds first
        assert b.n_id.unique().numel() == b.n_id.numel() == b.num_nodes
        assert set(b.n_id.tolist()) == set(a.n_id.tolist())
        assert global_edges(b) == global_edges(a)
        assert b.edge_index.size(1) == a.edge_index.size(1)  # no duplicate edges
        for name in ("x", "y", "train_mask", "test_mask"):
            assert torch.equal(by_node(b, name), by_node(a, name)), name
    assert batches == 4


def test_edges_are_the_graphs_edges_and_hops_are_ordered(cora_data, cora_stores3):
    """e_id points at the very edge; nodes and edges come hop by hop (trim_to_layer)."""
    loader = DistNeighborLoader(cora_stores3, num_neighbors=[-1, -1], input_nodes=SEEDS[:50],
                                batch_size=50)
    batch = next(iter(loader))
    src, dst = cora_data.edge_index[:, batch.e_id]
    assert torch.equal(batch.n_id[batch.edge_index[0]], src)
    assert torch.equal(batch.n_id[batch.edge_index[1]], dst)
    nodes, edges = batch.num_sampled_nodes, batch.num_sampled_edges
    assert nodes[0] == 50 and sum(nodes) == batch.num_nodes
    assert len(edges) == 2 and sum(edges) == batch.edge_index.size(1)
    # Hop-1 edges end at seeds, hop-2 edges at the nodes found in hop 1.
    col = batch.edge_index[1]
    assert int(col[:edges[0]].max()) < nodes[0]
    assert bool(((col[edges[0]:] >= nodes[0]) & (col[edges[0]:] < nodes[0] + nodes[1])).all())
    # Hop-1 nodes are exactly the in-neighbours of the seeds that are not seeds.
    seeds = set(SEEDS[:50].tolist())
    ei = cora_data.edge_index
    expected = set(ei[0][torch.isin(ei[1], SEEDS[:50])].tolist()) - seeds
    assert set(batch.n_id[nodes[0]:nodes[0] + nodes[1]].tolist()) == expected


def test_trim_to_layer_gives_the_same_output(cora_stores3):
    from torch_geometric.nn.models import GraphSAGE

    torch.manual_seed(0)
    model = GraphSAGE(1433, 16, num_layers=2, out_channels=7).eval()
    loader = DistNeighborLoader(cora_stores3, num_neighbors=[5, 5], input_nodes=SEEDS[:64],
                                batch_size=64, seed=1)
    batch = next(iter(loader))
    full = model(batch.x, batch.edge_index)[:batch.batch_size]
    trimmed = model(batch.x, batch.edge_index,
                    num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
    assert torch.allclose(full, trimmed, atol=1e-5)


def test_mask_inputs_report_input_id_like_pyg(cora_data, cora_stores3):
    kw = dict(num_neighbors=[-1], input_nodes=cora_data.val_mask, batch_size=200)
    for a, b in zip(NeighborLoader(cora_data, **kw), DistNeighborLoader(cora_stores3, **kw)):
        assert torch.equal(b.input_id, a.input_id)
        assert torch.equal(b.n_id[:b.batch_size], a.n_id[:a.batch_size])
        assert global_edges(b) == global_edges(a)
