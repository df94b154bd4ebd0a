"""Temporal and weighted sampling on a heterogeneous graph, on real servers,
against a plain-Python reference over the whole HeteroData: at full fan-out
every seed's tree (disjoint, as PyG's temporal sampling is) holds exactly
the nodes of every type no later than the seed and the edges into the nodes
each hop expanded; weight-0 edges are never drawn."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from support.servers import serve_parts

import pyg_dist
from pyg_dist.datasets import fake_hetero
from pyg_dist.errors import LoaderError
from pyg_dist.loader import DistNeighborLoader


@pytest.fixture(scope="module")
def graph():
    data = fake_hetero(num_nodes=150, avg_degree=3.0, num_channels=4, seed=11)
    generator = torch.Generator().manual_seed(11)
    for node_type in data.node_types:
        data[node_type].time = torch.randint(0, 100, (data[node_type].num_nodes,),
                                             generator=generator)
    for edge_type in data.edge_types:
        num_edges = data[edge_type].edge_index.size(1)
        weight = torch.rand(num_edges, generator=generator)
        weight[torch.arange(num_edges) % 3 == 0] = 0.0  # every third edge never drawn
        data[edge_type].weight = weight
    return data


@pytest.fixture(scope="module", params=[2, 3], ids=["2parts", "3parts"])
def stores(request, graph, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"hetero-temporal-{request.param}") / "ds"
    pyg_dist.partition(graph, request.param, root, "metis")
    with serve_parts(root) as cluster:
        fs, gs = pyg_dist.connect(cluster.endpoints)
        try:
            yield fs, gs
        finally:
            fs.close()


def reference_tree(graph, seed_type, seed, limit, hops):
    """Nodes per type and ``(src, dst, e_id)`` per edge type of one seed's
    temporal tree: PyG's rule (each hop expands the nodes the previous hop
    added; neighbours later than ``limit`` are left out)."""
    in_edges = {}
    for edge_type in graph.edge_types:
        by_dst = defaultdict(list)
        for e, (u, v) in enumerate(graph[edge_type].edge_index.t().tolist()):
            by_dst[v].append((u, e))
        in_edges[edge_type] = by_dst
    seen = {t: set() for t in graph.node_types}
    seen[seed_type].add(seed)
    edges = {t: set() for t in graph.edge_types}
    frontier = {seed_type: [seed]}
    for _ in range(hops):
        added = defaultdict(list)
        for edge_type in graph.edge_types:
            src, _, dst = edge_type
            for v in frontier.get(dst, []):
                for u, e in in_edges[edge_type][v]:
                    if int(graph[src].time[u]) > limit:
                        continue
                    edges[edge_type].add((u, v, e))
                    if u not in seen[src]:
                        seen[src].add(u)
                        added[src].append(u)
        frontier = added
    return seen, edges


def test_full_fanout_temporal_trees_equal_the_reference(graph, stores):
    seeds = torch.arange(0, graph["v0"].num_nodes, 5)
    loader = DistNeighborLoader(stores, num_neighbors=[-1, -1], input_nodes=("v0", seeds),
                                time_attr="time", batch_size=10)
    checked = 0
    for batch in loader:
        trees_nodes = defaultdict(lambda: defaultdict(set))
        for node_type in graph.node_types:
            store = batch[node_type]
            for b, n in zip(store.batch.tolist(), store.n_id.tolist()):
                trees_nodes[b][node_type].add(n)
        trees_edges = defaultdict(lambda: defaultdict(set))
        for edge_type in graph.edge_types:
            src, _, dst = edge_type
            row, col = batch[edge_type].edge_index
            for r, c, e in zip(row.tolist(), col.tolist(), batch[edge_type].e_id.tolist()):
                b = int(batch[dst].batch[c])
                assert int(batch[src].batch[r]) == b  # an edge stays in its tree
                trees_edges[b][edge_type].add((int(batch[src].n_id[r]),
                                               int(batch[dst].n_id[c]), e))
        for b, seed in enumerate(batch["v0"].n_id[:batch["v0"].batch_size].tolist()):
            limit = int(graph["v0"].time[seed])
            nodes, edges = reference_tree(graph, "v0", seed, limit, 2)
            for node_type in graph.node_types:
                assert trees_nodes[b][node_type] == nodes[node_type], (seed, node_type)
            for edge_type in graph.edge_types:
                assert trees_edges[b][edge_type] == edges[edge_type], (seed, edge_type)
            checked += 1
    assert checked == seeds.numel()


def test_weighted_hetero_sampling_never_draws_weight_zero(graph, stores):
    loader = DistNeighborLoader(stores, num_neighbors=[4, 3], input_nodes="v0",
                                weight_attr="weight", batch_size=64, seed=2)
    drawn = 0
    for batch in loader:
        for edge_type in graph.edge_types:
            e_id = batch[edge_type].e_id
            assert bool((graph[edge_type].weight[e_id] > 0).all()), edge_type
            drawn += e_id.numel()
    assert drawn > 500


def test_unknown_time_attribute_is_refused_naming_it(stores):
    with pytest.raises(LoaderError, match="nope"):
        DistNeighborLoader(stores, num_neighbors=[2], input_nodes="v0", time_attr="nope")
