"""Heterogeneous DistNeighborLoader on real servers: at full fan-out every
batch equals PyG's NeighborLoader on the same HeteroData (node sets and rows
per node type, edges in global ids per edge type), for 2 and 3 parts,
synchronous and with prefetch; bad types are typed errors."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import TensorAttr
from torch_geometric.loader import NeighborLoader

from pyg_dist.errors import GraphKindMismatchError, LoaderError, UnknownTypeError
from pyg_dist.loader import DistNeighborLoader


@pytest.fixture
def graph(hetero_data):
    return hetero_data


@pytest.fixture
def stores(hetero_stores):
    return hetero_stores


def global_edges(batch, edge_type) -> set[tuple[int, int, int]]:
    """``(src, dst, edge id)`` of one edge type's edges, in global ids."""
    src, _, dst = edge_type
    row, col = batch[edge_type].edge_index
    return set(zip(batch[src].n_id[row].tolist(), batch[dst].n_id[col].tolist(),
                   batch[edge_type].e_id.tolist()))


def rows_by_node(store, name: str) -> torch.Tensor:
    """Rows of ``store[name]`` sorted by global node id."""
    return store[name][torch.argsort(store.n_id)]


def assert_same_batch(ours, ref, graph) -> None:
    for node_type in graph.node_types:
        a, b = ref[node_type], ours[node_type]
        assert b.n_id.unique().numel() == b.n_id.numel() == b.num_nodes, node_type
        assert set(b.n_id.tolist()) == set(a.n_id.tolist()), node_type
        for name in graph[node_type].keys():
            if isinstance(graph[node_type][name], torch.Tensor) and name in a:
                assert torch.equal(rows_by_node(b, name), rows_by_node(a, name)), \
                    (node_type, name)
    for edge_type in graph.edge_types:
        assert global_edges(ours, edge_type) == global_edges(ref, edge_type), edge_type
        # No edge twice.
        assert ours[edge_type].edge_index.size(1) == ref[edge_type].edge_index.size(1)


@pytest.mark.parametrize("prefetch", [0, 4])
def test_full_fanout_batches_equal_pyg_neighbor_loader(graph, stores, prefetch):
    seeds = torch.arange(0, graph["v0"].num_nodes, 3)
    ref = NeighborLoader(graph, num_neighbors=[-1, -1], input_nodes=("v0", seeds),
                         batch_size=40)
    dist = DistNeighborLoader(stores, num_neighbors=[-1, -1], input_nodes=("v0", seeds),
                              batch_size=40, prefetch=prefetch)
    assert len(dist) == len(ref)
    count = 0
    for a, b in zip(ref, dist):
        count += 1
        assert b["v0"].batch_size == a["v0"].batch_size
        assert torch.equal(b["v0"].input_id, a["v0"].input_id)
        assert torch.equal(b["v0"].n_id[:b["v0"].batch_size], a["v0"].n_id[:a["v0"].batch_size])
        assert_same_batch(b, a, graph)
    assert count == len(ref)


def test_per_edge_type_fanouts_and_masks_match_pyg(graph, stores):
    """A dict of fan-outs (one edge type not sampled at hop 2) and a mask input."""
    fanouts = {t: [-1, -1] for t in graph.edge_types}
    fanouts[graph.edge_types[0]] = [-1, 0]
    mask = graph["v0"].train_mask
    ref = NeighborLoader(graph, num_neighbors=fanouts, input_nodes=("v0", mask),
                         batch_size=64)
    dist = DistNeighborLoader(stores, num_neighbors=fanouts, input_nodes=("v0", mask),
                              batch_size=64)
    for a, b in zip(ref, dist):
        assert torch.equal(b["v0"].input_id, a["v0"].input_id)
        assert_same_batch(b, a, graph)


def test_batch_schema_counts_hops_per_type(graph, stores):
    fs, gs = stores
    loader = DistNeighborLoader(stores, num_neighbors=[4, 3], input_nodes="v1",
                                batch_size=32, seed=1)
    batch = next(iter(loader))
    assert batch["v1"].batch_size == 32
    assert torch.equal(batch["v1"].input_id, torch.arange(32))
    for node_type in graph.node_types:
        counts = batch[node_type].num_sampled_nodes
        assert len(counts) == 3 and sum(counts) == batch[node_type].num_nodes
        assert batch[node_type].x.size(0) == batch[node_type].num_nodes
        assert torch.equal(batch[node_type].x, graph[node_type].x[batch[node_type].n_id])
    for edge_type in graph.edge_types:
        counts = batch[edge_type].num_sampled_edges
        assert len(counts) == 2 and sum(counts) == batch[edge_type].edge_index.size(1)
        src, _, dst = edge_type
        # Every sampled edge is that edge of the graph.
        ei = graph[edge_type].edge_index[:, batch[edge_type].e_id]
        assert torch.equal(batch[src].n_id[batch[edge_type].edge_index[0]], ei[0])
        assert torch.equal(batch[dst].n_id[batch[edge_type].edge_index[1]], ei[1])
    # A fixed seed reproduces the batch.
    again = next(iter(DistNeighborLoader(stores, num_neighbors=[4, 3], input_nodes="v1",
                                         batch_size=32, seed=1)))
    for node_type in graph.node_types:
        assert torch.equal(again[node_type].n_id, batch[node_type].n_id)


def test_metadata_and_pyg_loaders_over_the_remote_pair(graph, stores):
    fs, gs = stores
    assert gs.metadata() == (graph.node_types, graph.edge_types)
    # PyG's own NeighborLoader runs over the (FeatureStore, GraphStore) pair.
    seeds = torch.arange(20)
    ref = next(iter(NeighborLoader(graph, num_neighbors=[-1], input_nodes=("v0", seeds),
                                   batch_size=20)))
    theirs = next(iter(NeighborLoader((fs, gs), num_neighbors=[-1],
                                      input_nodes=("v0", seeds), batch_size=20)))
    for node_type in graph.node_types:
        assert set(theirs[node_type].n_id.tolist()) == set(ref[node_type].n_id.tolist())


def test_bad_types_are_typed_errors_naming_what_exists(graph, stores):
    with pytest.raises(UnknownTypeError, match="v0"):
        DistNeighborLoader(stores, num_neighbors=[2], input_nodes=("paper", None))
    with pytest.raises(GraphKindMismatchError, match="name the node type"):
        DistNeighborLoader(stores, num_neighbors=[2], input_nodes=torch.arange(4))
    with pytest.raises(LoaderError, match="no fan-out for edge type"):
        DistNeighborLoader(stores, num_neighbors={graph.edge_types[0]: [2]},
                           input_nodes="v0")
    with pytest.raises(UnknownTypeError, match="no edge type .*its edge types are"):
        DistNeighborLoader(stores, num_neighbors={("v0", "nope", "v1"): [2]},
                           input_nodes="v0")
    with pytest.raises(LoaderError, match="outside"):
        DistNeighborLoader(stores, num_neighbors=[2],
                           input_nodes=("v0", torch.tensor([graph["v0"].num_nodes])))


def test_homogeneous_calls_on_hetero_and_the_reverse(cora_stores, stores):
    with pytest.raises(GraphKindMismatchError, match="homogeneous"):
        DistNeighborLoader(cora_stores, num_neighbors=[2], input_nodes=("paper", None))
    with pytest.raises(GraphKindMismatchError, match="homogeneous"):
        DistNeighborLoader(cora_stores, num_neighbors={("a", "b", "c"): [2]})


def test_a_batch_asks_each_server_once_for_every_node_types_features(graph, stores):
    """Counted by the servers: one get (of every node type) per server for a batch's
    three node types, and the rows are right."""
    fs, gs = stores
    router = gs.router
    before = [r.result["get_calls"] for r in router.call_all(
        [(p, "stats", {}, []) for p in range(router.num_parts)])]
    ids = {t: torch.arange(0, graph[t].num_nodes, 2) for t in graph.node_types}
    attrs = [TensorAttr(t, "x", ids[t]) for t in graph.node_types]
    for attr, x in zip(attrs, fs.multi_get_tensor(attrs)):
        assert torch.equal(x, graph[attr.group_name].x[ids[attr.group_name]])
    after = [r.result["get_calls"] for r in router.call_all(
        [(p, "stats", {}, []) for p in range(router.num_parts)])]
    assert [a - b for a, b in zip(after, before)] == [1] * router.num_parts


@pytest.mark.parametrize("filter_per_worker", [True, False])
def test_worker_processes_give_the_same_hetero_batches(graph, stores, filter_per_worker):
    """DataLoader worker processes (features joined in the workers or in the
    main process) yield the batches the synchronous loader yields."""
    kwargs = dict(num_neighbors=[-1, -1], input_nodes=("v0", torch.arange(90)), batch_size=30)
    ref = list(DistNeighborLoader(stores, **kwargs))
    got = list(DistNeighborLoader(stores, num_workers=2, filter_per_worker=filter_per_worker,
                                  **kwargs))
    assert len(got) == len(ref) == 3
    for a, b in zip(ref, got):
        assert_same_batch(b, a, graph)


def test_bidirectional_hetero_batches_hold_both_directions(graph, stores):
    """subgraph_type='bidirectional' on a heterogeneous graph (PyG's
    to_bidirectional): an edge type between nodes of one type holds every
    sampled edge in both directions."""
    loader = DistNeighborLoader(stores, num_neighbors=[5, 5], input_nodes="v0",
                                batch_size=64, subgraph_type="bidirectional", seed=6)
    batch = next(iter(loader))
    same_type = [t for t in graph.edge_types if t[0] == t[-1]]
    assert same_type, "the test graph needs an edge type within one node type"
    sampled = 0
    for edge_type in same_type:
        n_id = batch[edge_type[0]].n_id
        row, col = batch[edge_type].edge_index
        pairs = set(zip(n_id[row].tolist(), n_id[col].tolist()))
        assert pairs == {(v, u) for u, v in pairs}, edge_type
        sampled += len(pairs)
    assert sampled > 0


def test_induced_hetero_batches_equal_pyg(graph, stores):
    """subgraph_type='induced' at full fan-out: the same nodes as PyG, and
    every edge of every type between them."""
    seeds = torch.arange(0, 60, 3)
    ref = NeighborLoader(graph, num_neighbors=[-1], input_nodes=("v0", seeds),
                         batch_size=20, subgraph_type="induced")
    dist = DistNeighborLoader(stores, num_neighbors=[-1], input_nodes=("v0", seeds),
                              batch_size=20, subgraph_type="induced")
    for a, b in zip(ref, dist):
        for node_type in graph.node_types:
            assert set(b[node_type].n_id.tolist()) == set(a[node_type].n_id.tolist())
        for edge_type in graph.edge_types:
            src, _, dst = edge_type
            ei = graph[edge_type].edge_index
            inside = torch.isin(ei[0], b[src].n_id) & torch.isin(ei[1], b[dst].n_id)
            assert global_edges(b, edge_type) == set(zip(
                ei[0, inside].tolist(), ei[1, inside].tolist(),
                inside.nonzero().view(-1).tolist())), edge_type
            assert {(s, d) for s, d, _ in global_edges(b, edge_type)} == \
                {(int(a[src].n_id[r]), int(a[dst].n_id[c]))
                 for r, c in a[edge_type].edge_index.t().tolist()}, edge_type
