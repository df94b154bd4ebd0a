"""The bundled partitioners: METIS quality and balance options, random
balance, and the symmetric CSR they are built on."""

from __future__ import annotations

import torch
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

import pyg_dist
from pyg_dist.partitioning import PartitionInput, symmetric_csr


def test_symmetric_csr_matches_pyg_to_undirected():
    gen = torch.Generator().manual_seed(3)
    n = 300
    edge_index = torch.randint(0, n, (2, 2000), generator=gen)
    edge_index[:, :50] = edge_index[0, :50]  # self loops
    edge_index = torch.cat([edge_index, edge_index[:, :100]], dim=1)  # duplicates
    xadj, adjncy = symmetric_csr(edge_index, n)
    expected, _ = remove_self_loops(coalesce(to_undirected(edge_index, num_nodes=n),
                                             num_nodes=n))
    rows = torch.repeat_interleave(torch.arange(n), torch.from_numpy(xadj).diff())
    got = torch.stack([rows, torch.from_numpy(adjncy)])
    assert torch.equal(got, expected)
    assert xadj.dtype.name == "int64" and adjncy.dtype.name == "int64"


def test_symmetric_csr_of_a_graph_without_edges():
    xadj, adjncy = symmetric_csr(torch.empty(2, 0, dtype=torch.long), 4)
    assert xadj.tolist() == [0, 0, 0, 0, 0] and adjncy.size == 0


def test_metis_cut_is_well_below_random_on_cora(tmp_path, cora_graph):
    cuts = {}
    for name in ("metis", "random"):
        for parts in (2, 4):
            reader = pyg_dist.partition(cora_graph, parts, tmp_path / f"{name}{parts}", name)
            cuts[name, parts] = reader.meta["stats"]["edge_cut"]
    print(f"Cora edge cut (directed edges, of 10556): {cuts}")
    for parts in (2, 4):
        assert cuts["metis", parts] < 0.25 * cuts["random", parts]


def test_random_is_balanced_and_seeded(cora_graph):
    graph = PartitionInput(cora_graph.num_nodes, cora_graph.edge_index)
    from pyg_dist.plugins import default_registry

    cls = default_registry.partitioner("random")
    a, b = cls(seed=1).assign(graph, 3), cls(seed=1).assign(graph, 3)
    c = cls(seed=2).assign(graph, 3)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.bincount(a).tolist() == [903, 903, 902]


def _train_counts(reader):
    return [p["stats"]["num_train_nodes"] for p in reader.meta["parts"]]


def test_metis_balance_train_balances_training_nodes(tmp_path, cora_graph):
    reader = pyg_dist.partition(cora_graph, 4, tmp_path / "bt", "metis", balance_train=True)
    counts = _train_counts(reader)
    mean = sum(counts) / 4
    assert max(counts) <= 1.1 * mean and min(counts) >= 0.9 * mean, counts
    assert reader.meta["stats"]["node_balance"] <= 1.05


def test_metis_balance_edges_balances_edges(tmp_path, cora_graph):
    plain = pyg_dist.partition(cora_graph, 4, tmp_path / "plain", "metis")
    balanced = pyg_dist.partition(cora_graph, 4, tmp_path / "be", "metis", balance_edges=True)
    assert balanced.meta["stats"]["edge_balance"] <= 1.05
    assert balanced.meta["stats"]["edge_balance"] < plain.meta["stats"]["edge_balance"]
    assert balanced.meta["stats"]["node_balance"] <= 1.05


def test_metis_is_deterministic_for_a_seed(cora_graph):
    from pyg_dist.plugins import default_registry

    graph = PartitionInput(cora_graph.num_nodes, cora_graph.edge_index,
                           train_mask=cora_graph.train_mask)
    cls = default_registry.partitioner("metis")
    for options in ({}, {"balance_train": True, "balance_edges": True}):
        assert torch.equal(cls(seed=5, **options).assign(graph, 4),
                           cls(seed=5, **options).assign(graph, 4))


def test_thinned_csr_is_symmetric_and_keeps_low_degree_edges(cora_graph):
    n = cora_graph.num_nodes
    full_xadj, full_adj = symmetric_csr(cora_graph.edge_index, n)
    xadj, adj = symmetric_csr(cora_graph.edge_index, n, max_degree=4)
    rows = torch.repeat_interleave(torch.arange(n), torch.from_numpy(xadj).diff())
    kept = torch.stack([rows, torch.from_numpy(adj)])
    assert torch.equal(coalesce(kept.flip(0), num_nodes=n), kept), "must stay symmetric"
    full_rows = torch.repeat_interleave(torch.arange(n), torch.from_numpy(full_xadj).diff())
    full = set(zip(full_rows.tolist(), full_adj.tolist()))
    thin = set(zip(rows.tolist(), adj.tolist()))
    assert thin <= full
    degree = torch.from_numpy(full_xadj).diff().tolist()
    low = {(u, v) for u, v in full if degree[u] <= 4 and degree[v] <= 4}
    assert low and low <= thin, "edges between low-degree nodes are all kept"
    assert 0.3 * len(full) < len(thin) < len(full)


def test_metis_on_a_thinned_graph_still_writes_every_edge(tmp_path, cora_graph, reassembled):
    reader = pyg_dist.partition(cora_graph, 4, tmp_path / "thin", "metis", max_degree=3)
    rebuilt, _ = reassembled(reader)
    assert torch.equal(rebuilt.edge_index, cora_graph.edge_index)
    random = pyg_dist.partition(cora_graph, 4, tmp_path / "random", "random")
    assert reader.meta["stats"]["edge_cut"] < 0.5 * random.meta["stats"]["edge_cut"]
    assert reader.meta["partitioner"]["options"]["max_degree"] == 3
