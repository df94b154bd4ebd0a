"""DistNeighborSampler with finite fan-outs against real partition servers (Cora)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler import EdgeSamplerInput, NodeSamplerInput
from torch_geometric.utils import degree

from pyg_dist.errors import GraphKindMismatchError, SamplerError, StoreError
from pyg_dist.sampler.dist_neighbor_sampler import DistNeighborSampler

SEEDS = torch.arange(3, 2708, 23)  # 118 seeds all over the graph


def _inputs(seeds: torch.Tensor = SEEDS) -> NodeSamplerInput:
    return NodeSamplerInput(input_id=torch.arange(seeds.numel()), node=seeds)


def _hop_slices(out):
    start = 0
    for count in out.num_sampled_edges:
        yield slice(start, start + count)
        start += count


def _check_edges_exist(data, out) -> None:
    src, dst = data.edge_index[:, out.edge]
    assert torch.equal(out.node[out.row], src)
    assert torch.equal(out.node[out.col], dst)


@pytest.mark.parametrize("fanout", [[5, 3], [1, 1, 1], [0, 4]])
def test_without_replacement_every_node_gets_min_degree_fanout(cora_data, cora_stores3, fanout):
    sampler = DistNeighborSampler(cora_stores3, num_neighbors=fanout, seed=0)
    out = sampler.sample_from_nodes(_inputs())
    in_deg = degree(cora_data.edge_index[1], cora_data.num_nodes).long()
    assert torch.equal(out.node[:SEEDS.numel()], SEEDS)  # seeds first
    assert out.node.unique().numel() == out.node.numel()
    assert out.num_sampled_nodes[0] == SEEDS.numel() and sum(out.num_sampled_nodes) == \
        out.node.numel()
    _check_edges_exist(cora_data, out)
    start = 0
    for hop, (k, hop_edges) in enumerate(zip(fanout, _hop_slices(out))):
        frontier = torch.arange(start, start + out.num_sampled_nodes[hop])
        start += out.num_sampled_nodes[hop]
        col = out.col[hop_edges]
        assert bool(torch.isin(col, frontier).all())
        got = torch.bincount(col - (start - frontier.numel()), minlength=frontier.numel())
        assert torch.equal(got, in_deg[out.node[frontier]].clamp(max=k))
        # No edge is drawn twice for a node.
        assert out.edge[hop_edges].unique().numel() == col.numel()


def test_with_replacement_every_node_with_neighbours_gets_exactly_fanout(cora_data,
                                                                          cora_stores3):
    sampler = DistNeighborSampler(cora_stores3, num_neighbors=[7], replace=True, seed=0)
    out = sampler.sample_from_nodes(_inputs())
    _check_edges_exist(cora_data, out)
    in_deg = degree(cora_data.edge_index[1], cora_data.num_nodes).long()
    got = torch.bincount(out.col, minlength=SEEDS.numel())
    assert torch.equal(got, torch.where(in_deg[SEEDS] > 0, 7, 0))


def test_a_fixed_seed_reproduces_batches_and_another_seed_differs(cora_stores3):
    a = DistNeighborSampler(cora_stores3, num_neighbors=[4, 4], seed=7)
    b = DistNeighborSampler(cora_stores3, num_neighbors=[4, 4], seed=7)
    c = DistNeighborSampler(cora_stores3, num_neighbors=[4, 4], seed=8)
    for _ in range(2):
        out_a, out_b = a.sample_from_nodes(_inputs()), b.sample_from_nodes(_inputs())
        assert torch.equal(out_a.node, out_b.node) and torch.equal(out_a.edge, out_b.edge)
    assert not torch.equal(a.sample_from_nodes(_inputs()).edge,
                           c.sample_from_nodes(_inputs()).edge)
    assert torch.equal(a.sample_from_nodes(_inputs(), seed=3).edge,
                       c.sample_from_nodes(_inputs(), seed=3).edge)


def test_uniform_choice_among_neighbours(cora_data, cora_stores3):
    """Fan-out 1 on the highest-degree node: every neighbour about equally often."""
    in_deg = degree(cora_data.edge_index[1], cora_data.num_nodes).long()
    hub = int(in_deg.argmax())
    draws = 40 * int(in_deg[hub])
    sampler = DistNeighborSampler(cora_stores3, num_neighbors=[1], seed=0)
    out = sampler.sample_from_nodes(_inputs(torch.full((draws,), hub)))
    counts = torch.bincount(out.edge, minlength=cora_data.num_edges)
    counts = counts[cora_data.edge_index[1] == hub].double()
    assert int(counts.sum()) == draws
    # Chi-square against uniform, with a bound far in the tail (seeded: not flaky).
    df = counts.numel() - 1
    chi2 = float(((counts - 40.0) ** 2 / 40.0).sum())
    assert chi2 < df + 8 * (2 * df) ** 0.5


def test_disjoint_gives_every_seed_its_own_tree(cora_data, cora_stores3):
    seeds = torch.tensor([10, 10, 500, 2000])
    sampler = DistNeighborSampler(cora_stores3, num_neighbors=[3, 2], disjoint=True, seed=0)
    out = sampler.sample_from_nodes(_inputs(seeds))
    _check_edges_exist(cora_data, out)
    assert torch.equal(out.node[:4], seeds) and torch.equal(out.batch[:4], torch.arange(4))
    assert torch.equal(out.batch[out.row], out.batch[out.col])
    pairs = out.batch * cora_data.num_nodes + out.node
    assert pairs.unique().numel() == pairs.numel()
    assert set(out.batch.tolist()) == {0, 1, 2, 3}


def test_bidirectional_and_induced_subgraphs(cora_data, cora_stores3):
    seeds = SEEDS[:20]
    bi = DistNeighborSampler(cora_stores3, num_neighbors=[3, 3],
                             subgraph_type="bidirectional", seed=0)
    out = bi.sample_from_nodes(_inputs(seeds))
    pairs = set(zip(out.row.tolist(), out.col.tolist()))
    assert all((c, r) in pairs for r, c in pairs)

    ind = DistNeighborSampler(cora_stores3, num_neighbors=[3, 3], subgraph_type="induced",
                              seed=0)
    out = ind.sample_from_nodes(_inputs(seeds))
    _check_edges_exist(cora_data, out)
    ei = cora_data.edge_index
    inside = torch.isin(ei[0], out.node) & torch.isin(ei[1], out.node)
    assert set(out.edge.tolist()) == set(inside.nonzero().view(-1).tolist())


def test_sample_from_edges(cora_data, cora_stores3):
    sampler = DistNeighborSampler(cora_stores3, num_neighbors=[3], seed=0)
    ei = cora_data.edge_index[:, :32]
    out = sampler.sample_from_edges(EdgeSamplerInput(None, ei[0], ei[1]))
    _check_edges_exist(cora_data, out)
    assert bool(torch.isin(ei.reshape(-1), out.node).all())


def test_bad_configuration_and_input_raise_typed_errors(cora_stores3):
    with pytest.raises(SamplerError, match="num_neighbors"):
        DistNeighborSampler(cora_stores3, num_neighbors=[5, -2])
    with pytest.raises(GraphKindMismatchError, match="homogeneous"):
        DistNeighborSampler(cora_stores3, num_neighbors={("a", "to", "b"): [1]})
    with pytest.raises(SamplerError, match="subgraph_type"):
        DistNeighborSampler(cora_stores3, num_neighbors=[1], subgraph_type="sideways")
    with pytest.raises(SamplerError, match="pyg_dist.connect"):
        DistNeighborSampler((None, object()), num_neighbors=[1])
    sampler = DistNeighborSampler(cora_stores3, num_neighbors=[2])
    with pytest.raises(StoreError, match="outside"):
        sampler.sample_from_nodes(_inputs(torch.tensor([0, 2708])))
