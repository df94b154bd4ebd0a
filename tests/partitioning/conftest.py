"""Fixtures for the partitioning tests: real graphs and a reassembler that
rebuilds a graph from the parts on disk."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from pyg_dist.datasets import fake
from pyg_dist.partitioning import PartitionReader


@pytest.fixture(scope="session")
def cora_graph(cora_data) -> Data:
    """Cora (the session's one copy, tests/support/served_cora.py)."""
    return cora_data


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


def small_hetero(seed: int = 0) -> HeteroData:
    """A small heterogeneous graph with every feature kind: node features on
    each type, labels and a mask on one, edge attributes of two widths, an
    edge type within one node type, one between two, and a tiny node type
    (fewer nodes than some part counts)."""
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    for node_type, n in (("paper", 150), ("author", 90), ("inst", 3)):
        data[node_type].x = torch.randn(n, 4, generator=gen)
    data["paper"].y = torch.randint(0, 3, (150,), generator=gen)
    data["paper"].train_mask = torch.rand(150, generator=gen) < 0.3
    data["author"].year = torch.randint(1990, 2020, (90,), generator=gen, dtype=torch.int32)

    def edges(num_src: int, num_dst: int, count: int) -> torch.Tensor:
        return torch.stack([torch.randint(0, num_src, (count,), generator=gen),
                            torch.randint(0, num_dst, (count,), generator=gen)])

    data["author", "writes", "paper"].edge_index = edges(90, 150, 500)
    data["author", "writes", "paper"].edge_attr = torch.randn(500, 2, generator=gen)
    data["paper", "cites", "paper"].edge_index = edges(150, 150, 600)
    data["paper", "cites", "paper"].edge_weight = torch.rand(600, generator=gen)
    data["author", "in", "inst"].edge_index = edges(90, 3, 90)
    data["paper", "rev_writes", "author"].edge_index = \
        data["author", "writes", "paper"].edge_index.flip(0)
    return data


@pytest.fixture(scope="session")
def hetero_graph() -> HeteroData:
    return small_hetero()


def reassemble_hetero(reader: PartitionReader) -> HeteroData:
    """Rebuilds a heterogeneous graph from its parts, per type in global id /
    edge id order, checking that every node of every type is owned by exactly
    one part and every edge is stored exactly once, at its destination's owner,
    with each destination's edges in input order."""
    out = HeteroData()
    owner = {}
    for node_type in reader.node_types:
        n = reader.num_nodes_of(node_type)
        owner[node_type] = torch.full((n,), -1, dtype=torch.int64)
        out[node_type].num_nodes = n
    stored = {et: torch.zeros(reader.num_edges_of(et), dtype=torch.int64)
              for et in reader.edge_types}
    for et in reader.edge_types:
        out[et].edge_index = torch.full((2, reader.num_edges_of(et)), -1, dtype=torch.int64)
    for k in range(reader.num_parts):
        part = reader.load_part(k)
        for node_type, nodes in part.nodes.items():
            ids = nodes.node_ids
            assert bool((ids[1:] > ids[:-1]).all()), "node_ids must be sorted and unique"
            assert bool((owner[node_type][ids] == -1).all()), "a node is owned twice"
            owner[node_type][ids] = k
            for name, value in nodes.features.items():
                if name not in out[node_type]:
                    out[node_type][name] = torch.empty(
                        (out[node_type].num_nodes, *value.shape[1:]), dtype=value.dtype)
                out[node_type][name][ids] = value
        for et, edges in part.edges.items():
            dst_ids = part.nodes[et[2]].node_ids
            assert edges.indptr.numel() == dst_ids.numel() + 1
            degree = edges.indptr[1:] - edges.indptr[:-1]
            dst = torch.repeat_interleave(dst_ids, degree)
            # Within one destination, edges keep their input (edge id) order.
            segment = torch.repeat_interleave(torch.arange(degree.numel()), degree)
            same = segment[1:] == segment[:-1]
            assert bool((edges.edge_ids[1:][same] > edges.edge_ids[:-1][same]).all())
            stored[et].index_add_(0, edges.edge_ids, torch.ones_like(edges.edge_ids))
            out[et].edge_index[0, edges.edge_ids] = edges.indices
            out[et].edge_index[1, edges.edge_ids] = dst
            for name, value in edges.features.items():
                if name not in out[et]:
                    out[et][name] = torch.empty((stored[et].numel(), *value.shape[1:]),
                                                dtype=value.dtype)
                out[et][name][edges.edge_ids] = value
    book = reader.hetero_book
    for node_type, owners in owner.items():
        assert bool((owners >= 0).all()), f"a {node_type} node is owned by no part"
        assert torch.equal(owners, book.part_of(node_type, torch.arange(owners.numel())))
    for et, count in stored.items():
        assert bool((count == 1).all()), f"an edge of {et} is stored zero or several times"
        dst_owner = owner[et[2]][out[et].edge_index[1]]
        assert dst_owner.numel() == 0 or int(dst_owner.min()) >= 0
    return out


@pytest.fixture
def reassembled_hetero():
    """The :func:`reassemble_hetero` helper, as a fixture."""
    return reassemble_hetero
