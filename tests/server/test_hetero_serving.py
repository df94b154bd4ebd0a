"""Heterogeneous partitions served by real ``pyg-dist serve`` processes: every
op answers per node and edge type exactly what the input HeteroData holds."""

from __future__ import annotations

import pytest
import torch
from support.servers import serve_parts

import pyg_dist
from pyg_dist.datasets import fake_hetero
from pyg_dist.errors import RemoteError
from pyg_dist.rpc import RpcClient

NUM_PARTS = 2


@pytest.fixture(scope="module")
def graph():
    return fake_hetero(num_nodes=300, avg_degree=4.0, num_channels=8, seed=3)


@pytest.fixture(scope="module")
def served(graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("hetero-serve") / "ds"
    reader = pyg_dist.partition(graph, NUM_PARTS, root, "metis")
    with serve_parts(root) as cluster, RpcClient(cluster.endpoints) as client:
        yield reader, client


def test_meta_lists_every_type_with_its_count_features_and_book(graph, served):
    reader, client = served
    for part in range(NUM_PARTS):
        reply = client.call(part, "meta")
        result = reply.result
        assert result["is_hetero"] is True and result["features"] == {}
        assert [t["name"] for t in result["node_types"]] == graph.node_types
        for entry, book in zip(result["node_types"], reply.tensors):
            store = graph[entry["name"]]
            assert entry["num_nodes"] == store.num_nodes
            assert entry["features"]["x"]["size"] == list(store.x.shape)
            assert torch.equal(book, reader.book_of(entry["name"]).to_tensor())
        assert [tuple(t["type"]) for t in result["edge_types"]] == graph.edge_types
        assert [t["num_edges"] for t in result["edge_types"]] == \
            [graph[t].edge_index.size(1) for t in graph.edge_types]


def test_get_answers_every_node_type_from_its_owner(graph, served):
    reader, client = served
    for node_type in graph.node_types:
        ids = torch.arange(graph[node_type].num_nodes)
        x = torch.empty_like(graph[node_type].x)
        for part, positions, owned in reader.book_of(node_type).split(ids):
            reply = client.call(part, "get", {"groups": [{"group": node_type, "attrs": ["x"]}]},
                                [owned])
            x[positions] = reply.tensors[0]
        assert torch.equal(x, graph[node_type].x), node_type
    labels = client.call(0, "get", {"groups": [{"group": "v0", "attrs": ["y"]}]},
                         [reader.book_of("v0").split(torch.arange(5))[0][2]]).tensors[0]
    assert labels.dtype == graph["v0"].y.dtype


def test_full_fanout_sample_and_edge_index_give_every_edge_of_every_type(graph, served):
    reader, client = served
    for edge_type in graph.edge_types:
        src, dst = graph[edge_type].edge_index
        dst_type = edge_type[-1]
        seeds = torch.arange(graph[dst_type].num_nodes)
        found = set()
        for part, _, owned in reader.book_of(dst_type).split(seeds):
            counts, nbrs, eids = client.call(
                part, "sample", {"edge_types": [list(edge_type)], "num_neighbors": -1, "seed": 1},
                [owned]).tensors
            found |= set(zip(nbrs.tolist(), owned.repeat_interleave(counts).tolist(),
                             eids.tolist()))
        assert found == set(zip(src.tolist(), dst.tolist(), range(src.numel()))), edge_type
        paged = set()
        for part in range(NUM_PARTS):
            row, col, eid = client.call(part, "edge_index",
                                        {"edge_type": list(edge_type)}).tensors
            paged |= set(zip(row.tolist(), col.tolist(), eid.tolist()))
        assert paged == found


def test_ids_are_checked_against_their_own_type(graph, served):
    reader, client = served
    small = min(graph.node_types, key=lambda t: graph[t].num_nodes)
    too_big = torch.tensor([graph[small].num_nodes])
    owner = int(reader.book_of(small).part_of(torch.tensor([0]))[0])
    with pytest.raises(RemoteError, match=rf"node ids must lie in \[0, {too_big.item()}\)"):
        client.call(owner, "get", {"groups": [{"group": small, "attrs": ["x"]}]}, [too_big])
    with pytest.raises(RemoteError, match="no node type 'nope'"):
        client.call(0, "get", {"groups": [{"group": "nope", "attrs": ["x"]}]}, [torch.tensor([0])])
    with pytest.raises(RemoteError, match="holds no edge type"):
        client.call(0, "sample", {"edge_types": [["v0", "nope", "v1"]], "num_neighbors": 2},
                    [torch.tensor([0])])


def test_connect_reads_hetero_servers_type_by_type(graph, served):
    from pyg_dist.store.connect import connect

    _, client = served
    fs, gs = connect(client.endpoints)
    try:
        assert gs.is_hetero and gs.metadata() == (graph.node_types, graph.edge_types)
        for edge_type in graph.edge_types:
            assert gs.edge_counts[edge_type] == graph[edge_type].edge_index.size(1)
        for node_type in graph.node_types:
            ids = torch.randperm(graph[node_type].num_nodes)[:50]
            x = fs.get_tensor(group_name=node_type, attr_name="x", index=ids)
            assert torch.equal(x, graph[node_type].x[ids]), node_type
        edge_type = graph.edge_types[0]
        row, col = gs.get_edge_index(edge_type=edge_type, layout="coo")
        assert torch.equal(torch.stack([row, col]), graph[edge_type].edge_index)
    finally:
        fs.close()


def test_a_sample_of_every_edge_type_answers_each_as_its_own_sample_does(graph, served):
    """One request over every edge type whose destinations part 0 owns, at
    full fan-out, answers per edge type exactly what a ``sample`` of that
    edge type alone answers."""
    reader, client = served
    edge_types, sizes, ids = [], [], []
    for edge_type in graph.edge_types:
        owned = reader.book_of(edge_type[-1]).split(torch.arange(40))
        owned = [o for part, _, o in owned if part == 0]
        if owned:
            edge_types.append(edge_type)
            sizes.append(owned[0].numel())
            ids.append(owned[0])
    reply = client.call(0, "sample", {"edge_types": [list(t) for t in edge_types],
                                      "sizes": sizes, "num_neighbors": -1, "seed": 3},
                        [torch.cat(ids)])
    assert len(reply.tensors) == 3 * len(edge_types)
    for k, (edge_type, owned) in enumerate(zip(edge_types, ids)):
        single = client.call(0, "sample", {"edge_types": [list(edge_type)], "num_neighbors": -1,
                                           "seed": 1}, [owned]).tensors
        for got, want in zip(reply.tensors[3 * k:3 * k + 3], single):
            assert torch.equal(got, want), edge_type


@pytest.mark.parametrize("args, tensors, match", [
    ({"edge_types": [], "sizes": [], "num_neighbors": 2}, [torch.tensor([0])], "edge_types"),
    ({"edge_types": [["v0", "e0", "v1"]], "sizes": [2], "num_neighbors": 2},
     [torch.tensor([0])], "sum of 'sizes'"),
    ({"edge_types": [["v0", "e0", "v1"]], "sizes": [-1], "num_neighbors": 2},
     [torch.tensor([0])], "sizes"),
    ({"edge_types": [["v0", "e0", "v1"]] * 2, "sizes": [1, 0], "num_neighbors": [2]},
     [torch.tensor([0])], "num_neighbors"),
    ({"edge_types": [[[[[]]]]], "sizes": [1], "num_neighbors": 2},
     [torch.tensor([0])], "edge_type"),
    # Over msgpack's array limit: refused while decoding, before the op.
    ({"edge_types": [["v0", "e0", "v1"]] * 5000, "sizes": [0] * 5000, "num_neighbors": 2},
     [torch.empty(0, dtype=torch.long)], "max_array_len"),
    # Several edge types name their sizes; one may leave them out.
    ({"edge_types": [["v0", "e0", "v1"]] * 2, "num_neighbors": 2},
     [torch.tensor([0])], "sizes"),
    ({"edge_types": ["v0"], "num_neighbors": 2}, [torch.tensor([0])], "edge_type"),
    ({"edge_types": [None], "num_neighbors": 2}, [torch.tensor([0])], "no edge type"),
])
def test_malformed_sample_is_refused_and_the_server_keeps_serving(served, args, tensors,
                                                                  match):
    _, client = served
    with pytest.raises(RemoteError, match=match):
        client.call(0, "sample", args, tensors)
    assert client.call(0, "meta").result["part"] == 0


def test_get_answers_every_group_as_one_group_does(graph, served):
    reader, client = served
    groups, ids = [], []
    for node_type in graph.node_types:
        owned = [o for part, _, o in reader.book_of(node_type).split(torch.arange(30))
                 if part == 1][0]
        attrs = ["x", "y"] if node_type == "v0" else ["x"]
        groups.append({"group": node_type, "attrs": attrs})
        ids.append(owned)
    reply = client.call(1, "get", {"groups": groups, "sizes": [i.numel() for i in ids]},
                        [torch.cat(ids)])
    expected = [graph[g["group"]][a][i] for g, i in zip(groups, ids) for a in g["attrs"]]
    assert len(reply.tensors) == len(expected)
    for got, want in zip(reply.tensors, expected):
        assert torch.equal(got, want)
    # One group alone, with or without its size, answers the same rows.
    one = client.call(1, "get", {"groups": groups[:1]}, [ids[0]]).tensors
    sized = client.call(1, "get", {"groups": groups[:1], "sizes": [ids[0].numel()]},
                        [ids[0]]).tensors
    for got, again, want in zip(one, sized, expected):
        assert torch.equal(got, want) and torch.equal(again, want)


@pytest.mark.parametrize("args, match", [
    ({"groups": [], "sizes": []}, "groups"),
    ({"groups": ["v0"], "sizes": [1]}, "groups"),
    ({"groups": [{"group": "v0", "attrs": ["x"]}], "sizes": [2]}, "sum of 'sizes'"),
    ({"groups": [{"group": "v0", "attrs": ["x"]}], "sizes": [True]}, "sizes"),
    ({"groups": [{"group": "nope", "attrs": ["x"]}], "sizes": [1]}, "no node type"),
    ({"groups": [{"group": "v0", "attrs": ["nope"]}], "sizes": [1]}, "unknown feature"),
    ({"groups": [{"group": "v0", "attrs": ["x"], "rows": [0]}]}, "groups"),
    ({"groups": [{"group": "v0", "attrs": ["x"]}] * 2}, "sizes"),
    ({"groups": {"group": "v0", "attrs": ["x"]}}, "groups"),
])
def test_malformed_get_is_refused_and_the_server_keeps_serving(served, args, match):
    reader, client = served
    owned = [o for part, _, o in reader.book_of("v0").split(torch.arange(30)) if part == 0][0]
    with pytest.raises(RemoteError, match=match):
        client.call(0, "get", args, [owned[:1]])
    assert client.call(0, "meta").result["part"] == 0
