"""Edge attributes served by real ``pyg-dist serve`` processes: ``meta``
reports them, ``edge_ids`` lists every part's edges (each edge exactly once
over all parts), ``get_edges`` answers the rows of the input graph by
global edge id and refuses what it must, and the server keeps serving."""

from __future__ import annotations

import pytest
import torch
from support.edge_graphs import BARE, hetero_graph, homo_graph
from support.rawzmq import RawDealer
from support.servers import serve_parts

import pyg_dist
from pyg_dist.errors import RemoteError
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.rpc.wire_format import ErrorReply
from pyg_dist.server import PartitionServer

ATTRS = ["edge_attr", "edge_weight", "edge_time"]


@pytest.fixture(scope="module")
def homo():
    return homo_graph()


@pytest.fixture(scope="module")
def homo_root(homo, tmp_path_factory):
    root = tmp_path_factory.mktemp("edge-attrs") / "homo-3"
    pyg_dist.partition(homo, 3, root, "metis")
    return root


@pytest.fixture(scope="module")
def homo_served(homo_root):
    with serve_parts(homo_root, serve_args=["--workers", "2"]) as cluster, \
            RpcClient(cluster.endpoints) as client:
        yield cluster, client


@pytest.fixture(scope="module")
def hetero():
    return hetero_graph()


@pytest.fixture(scope="module")
def hetero_served(hetero, tmp_path_factory):
    root = tmp_path_factory.mktemp("edge-attrs") / "hetero-2"
    pyg_dist.partition(hetero, 2, root, "metis")
    with serve_parts(root) as cluster, RpcClient(cluster.endpoints) as client:
        yield cluster, client


def _stored(client, part, edge_type=None):
    return client.call(part, "edge_ids", {"edge_type": edge_type}).tensors[0]


def test_meta_reports_the_edge_attributes(homo, homo_served):
    _, client = homo_served
    meta = client.call(0, "meta").result
    num_edges = homo.edge_index.size(1)
    assert meta["edge_features"] == {
        "edge_attr": {"dtype": "float32", "shape": [4], "size": [num_edges, 4]},
        "edge_weight": {"dtype": "float32", "shape": [], "size": [num_edges]},
        "edge_time": {"dtype": "int64", "shape": [], "size": [num_edges]},
    }
    # What an older client reads is still there, unchanged.
    assert meta["features"]["x"]["size"] == list(homo.x.shape)
    assert "edge_types" not in meta


def test_edge_ids_cover_every_edge_once_and_page(homo, homo_served):
    _, client = homo_served
    parts = [_stored(client, part) for part in range(3)]
    for ids in parts:
        assert ids.dtype == torch.int64 and bool((ids[1:] > ids[:-1]).all())
    every = torch.cat(parts)
    assert torch.equal(every.sort().values, torch.arange(homo.edge_index.size(1)))
    # An edge is stored by the owner of its destination.
    meta = client.call(0, "meta")
    book = meta.tensors[0].long()
    for part, ids in enumerate(parts):
        assert bool((book[homo.edge_index[1, ids]] == part).all())
    reply = client.call(1, "edge_ids", {"edge_type": None, "start": 0, "count": 1})
    total = reply.result["total"]
    assert total == parts[1].numel()
    pages = [client.call(1, "edge_ids", {"edge_type": None, "start": s, "count": 100})
             for s in range(0, total, 100)]
    assert torch.equal(torch.cat([p.tensors[0] for p in pages]), parts[1])
    past = client.call(1, "edge_ids", {"edge_type": None, "start": total})
    assert past.tensors[0].numel() == 0 and past.result["total"] == total


def test_get_edges_answers_the_input_rows_in_the_asked_order(homo, homo_served):
    _, client = homo_served
    generator = torch.Generator().manual_seed(0)
    for part in range(3):
        owned = _stored(client, part)
        ids = owned[torch.randint(owned.numel(), (500,), generator=generator)]
        reply = client.call(part, "get_edges", {"edge_type": None, "attrs": ATTRS}, [ids])
        assert reply.result == {"attrs": ATTRS}
        for name, tensor in zip(ATTRS, reply.tensors):
            assert tensor.dtype == homo[name].dtype
            assert torch.equal(tensor, homo[name][ids]), name
        empty = client.call(part, "get_edges", {"attrs": ["edge_attr"]},
                            [torch.empty(0, dtype=torch.long)])
        assert empty.tensors[0].shape == (0, 4)


def test_stats_count_what_get_edges_served(homo_served):
    _, client = homo_served
    before = client.call(2, "stats").result
    ids = _stored(client, 2)[:10]
    client.call(2, "get_edges", {"edge_type": None, "attrs": ["edge_attr", "edge_time"]}, [ids])
    after = client.call(2, "stats").result
    assert after["get_edges_calls"] == before["get_edges_calls"] + 1
    assert after["get_edges_rows"] == before["get_edges_rows"] + 10
    assert after["get_edges_bytes"] == before["get_edges_bytes"] + 10 * (16 + 8)
    assert after["get_bytes"] == before["get_bytes"]  # node rows are counted apart


def _not_stored(client, part):
    owned = set(_stored(client, part).tolist())
    return next(i for i in range(10**6) if i not in owned)


BAD = {
    # name: (op, args, tensors(client), remote type, message fragment)
    "edge of another part": ("get_edges", {"attrs": ["edge_attr"]},
                             lambda c: [torch.tensor([_not_stored(c, 0)])],
                             "StoreError", "edge ids are not owned by this part"),
    "out-of-range ids": ("get_edges", {"attrs": ["edge_attr"]},
                         lambda c: [torch.tensor([0, 10**9])], "StoreError",
                         "edge ids must lie in [0, "),
    "negative ids": ("get_edges", {"attrs": ["edge_attr"]}, lambda c: [torch.tensor([-1])],
                     "StoreError", "edge ids must lie in [0, "),
    "int32 ids": ("get_edges", {"attrs": ["edge_attr"]},
                  lambda c: [_stored(c, 0)[:3].int()], "ProtocolError", "1-D int64"),
    "float ids": ("get_edges", {"attrs": ["edge_attr"]},
                  lambda c: [_stored(c, 0)[:3].double()], "ProtocolError", "1-D int64"),
    "2-d ids": ("get_edges", {"attrs": ["edge_attr"]},
                lambda c: [_stored(c, 0)[:4].view(2, 2)], "ProtocolError", "1-D int64"),
    "no ids": ("get_edges", {"attrs": ["edge_attr"]}, lambda c: [], "ProtocolError",
               "'get_edges' takes 1 tensors, got 0"),
    "two id tensors": ("get_edges", {"attrs": ["edge_attr"]},
                       lambda c: [_stored(c, 0)[:2]] * 2, "ProtocolError",
                       "'get_edges' takes 1 tensors, got 2"),
    "unknown attribute": ("get_edges", {"attrs": ["edge_attr", "x"]},
                          lambda c: [_stored(c, 0)[:2]], "StoreError",
                          "unknown edge attribute(s) ['x']"),
    "attrs not a list": ("get_edges", {"attrs": "edge_attr"}, lambda c: [_stored(c, 0)[:2]],
                         "ProtocolError", "'attrs' must be"),
    "no attrs": ("get_edges", {"attrs": []}, lambda c: [_stored(c, 0)[:2]],
                 "ProtocolError", "'attrs' must be"),
    "unknown edge type": ("get_edges", {"attrs": ["edge_attr"], "edge_type": ["a", "b", "c"]},
                          lambda c: [_stored(c, 0)[:2]], "StoreError", "holds no edge type"),
    "malformed edge type": ("edge_ids", {"edge_type": ["a", 1]}, lambda c: [],
                            "ProtocolError", "argument 'edge_type' must be nil or [src, rel, dst]"),
    "edge_ids with tensors": ("edge_ids", {}, lambda c: [torch.tensor([1])],
                              "ProtocolError", "'edge_ids' takes 0 tensors, got 1"),
    "edge_ids start past the end": ("edge_ids", {"start": 10**9}, lambda c: [],
                                    "ProtocolError", "'start'"),
    "edge_ids negative count": ("edge_ids", {"count": -1}, lambda c: [],
                                "ProtocolError", "'count'"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_requests_are_refused_and_the_server_keeps_serving(homo, homo_served, name):
    cluster, client = homo_served
    op, args, make, remote_type, fragment = BAD[name]
    tensors = make(client)
    owned = _stored(client, 0)[:5]
    with RawDealer(cluster.endpoints[0]) as dealer:
        reply = dealer.call(41, op, args, tensors)
        assert isinstance(reply, ErrorReply)
        assert reply.type == remote_type, reply.message
        assert fragment in reply.message
        good = dealer.call(42, "get_edges", {"attrs": ["edge_attr"]}, [owned])
        assert not isinstance(good, ErrorReply), good
        assert torch.equal(good.tensors[0], homo.edge_attr[owned])


def test_an_answer_over_the_reply_limit_is_refused_before_it_is_computed(homo, homo_root):
    limit = 100 * 16  # 100 rows of edge_attr
    config = RpcConfig(workers=1, max_reply_bytes=limit)
    with PartitionServer(homo_root, 0, config=config) as server, \
            RpcClient([server.endpoint]) as client:
        owned = client.call(0, "edge_ids", {"count": 100}).tensors[0]
        fits = client.call(0, "get_edges", {"attrs": ["edge_attr"]}, [owned])
        assert torch.equal(fits.tensors[0], homo.edge_attr[owned])
        more = torch.cat([owned, owned[:1]])
        with pytest.raises(RemoteError, match="over this server's reply limit") as info:
            client.call(0, "get_edges", {"attrs": ["edge_attr"]}, [more])
        assert info.value.remote_type == "ProtocolError"
        with pytest.raises(RemoteError, match="over this server's reply limit"):
            client.call(0, "edge_ids", {"count": limit // 8 + 1})
        assert client.call(0, "stats").result["get_edges_calls"] == 1


@pytest.mark.parametrize("table", [True, False], ids=["id-table", "binary-search"])
def test_both_edge_id_lookups_answer_and_refuse_alike(homo, homo_root, monkeypatch, table):
    from pyg_dist.server import edge_features

    if not table:
        monkeypatch.setattr(edge_features, "EDGE_TABLE_MAX", 0)
    with PartitionServer(homo_root, 1) as server, RpcClient([server.endpoint]) as client:
        owned = client.call(0, "edge_ids").tensors[0]
        ids = owned[torch.randperm(owned.numel(), generator=torch.Generator().manual_seed(2))]
        reply = client.call(0, "get_edges", {"attrs": ["edge_weight"]}, [ids])
        assert torch.equal(reply.tensors[0], homo.edge_weight[ids])
        assert (server.ops._edges._table(None).index.table is not None) == table
        other = _not_stored(client, 0)
        for bad, message in (([other], "not owned by this part"),
                             ([-2], "must lie in [0, "), ([10**9], "must lie in [0, ")):
            with pytest.raises(RemoteError, match=message.replace("[", r"\[")) as info:
                client.call(0, "get_edges", {"attrs": ["edge_attr"]}, [torch.tensor(bad)])
            assert info.value.remote_type == "StoreError"


def test_hetero_meta_lists_every_edge_type_s_attributes(hetero, hetero_served):
    _, client = hetero_served
    meta = client.call(1, "meta").result
    assert meta["edge_features"] == {}
    for k, entry in enumerate(meta["edge_types"]):
        store = hetero[tuple(entry["type"])]
        num_edges = store.edge_index.size(1)
        expected = {} if k == BARE else {
            "edge_attr": {"dtype": "float64", "shape": [3], "size": [num_edges, 3]}}
        if k != BARE and k % 2:
            expected["edge_weight"] = {"dtype": "float32", "shape": [], "size": [num_edges]}
        assert entry["features"] == expected, entry["type"]


def test_hetero_get_edges_answers_every_edge_type(hetero, hetero_served):
    _, client = hetero_served
    for k, edge_type in enumerate(hetero.edge_types):
        wire = list(edge_type)
        parts = [_stored(client, part, wire) for part in range(2)]
        num_edges = hetero[edge_type].edge_index.size(1)
        assert torch.equal(torch.cat(parts).sort().values, torch.arange(num_edges))
        if k == BARE:
            with pytest.raises(RemoteError, match=r"of edge type .*; it has \[\]"):
                client.call(0, "get_edges", {"edge_type": wire, "attrs": ["edge_attr"]},
                            [parts[0][:1]])
            continue
        for part, owned in enumerate(parts):
            ids = owned.flip(0)
            reply = client.call(part, "get_edges", {"edge_type": wire, "attrs": ["edge_attr"]},
                                [ids])
            assert torch.equal(reply.tensors[0], hetero[edge_type].edge_attr[ids])
    with pytest.raises(RemoteError, match="holds no edge type None"):
        client.call(0, "get_edges", {"attrs": ["edge_attr"]}, [torch.tensor([0])])
