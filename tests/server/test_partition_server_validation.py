"""Bad requests to a real partition server process get error replies, and a
valid request afterwards is still answered correctly (bare DEALER socket)."""

from __future__ import annotations

import random
import re

import pytest
import torch
from support.rawzmq import RawDealer, header

from pyg_dist.rpc.wire_format import ErrorReply, encode_request

MAX_MESSAGE_BYTES = 1 << 20  # what the cora_cluster fixture passes to pyg-dist serve


@pytest.fixture(scope="module")
def part0(cora_reader):
    return cora_reader.load_part(0)


def _still_serving(dealer, part, req_id=777):
    ids = part.node_ids[[5, 0, 5, 17]]
    reply = dealer.call(req_id, "get", {"groups": [{"attrs": ["x", "y"]}]}, [ids])
    assert not isinstance(reply, ErrorReply), reply
    assert torch.equal(reply.tensors[0], part.node_features["x"][[5, 0, 5, 17]])
    assert torch.equal(reply.tensors[1], part.node_features["y"][[5, 0, 5, 17]])


def _not_owned(part):
    owned = set(part.node_ids.tolist())
    return next(i for i in range(2708) if i not in owned)


BAD_REQUESTS = {
    # name: (op, args, tensor factory(part), remote type, message fragment)
    "negative ids": ("get", {"groups": [{"attrs": ["x"]}]}, lambda p: [torch.tensor([0, -3])],
                     "StoreError", "must lie in [0, 2708)"),
    "out-of-range ids": ("sample", {"edge_types": [None], "num_neighbors": 2},
                         lambda p: [torch.tensor([2708])],
                         "StoreError", "must lie in [0, 2708)"),
    "ids of another part": ("get", {"groups": [{"attrs": ["x"]}]},
                            lambda p: [torch.tensor([_not_owned(p)])],
                            "StoreError", "not owned by this part"),
    "int32 ids": ("get", {"groups": [{"attrs": ["x"]}]}, lambda p: [p.node_ids[:3].int()],
                  "ProtocolError", "1-D int64"),
    "2-d ids": ("sample", {"edge_types": [None], "num_neighbors": 2},
                lambda p: [p.node_ids[:4].view(2, 2)],
                "ProtocolError", "1-D int64"),
    # Checked against the op table (pyg_dist.protocol.ops) before any handler runs.
    "no ids": ("get", {"groups": [{"attrs": ["x"]}]}, lambda p: [], "ProtocolError",
               "'get' takes 1 tensor(s) here (the ids"),
    "an argument the op does not take": (
        "get", {"groups": [{"attrs": ["x"]}], "rows": [1, 2]}, lambda p: [p.node_ids[:2]],
        "ProtocolError",
        "'get' has unknown arguments ['rows']; it takes ['groups', 'place', 'sizes']"),
    "a required argument missing": ("sample", {"edge_types": [None], "replace": True},
                                    lambda p: [p.node_ids[:2]],
                                    "ProtocolError",
                                    "'sample' lacks the required arguments ['num_neighbors']"),
    # Version 1's forms (docs/wire-protocol.md, "Changes") are refused by name.
    "a version 1 get": ("get", {"attrs": ["x"]}, lambda p: [p.node_ids[:2]], "ProtocolError",
                        "'get' has unknown arguments ['attrs']"),
    "a version 1 sample": ("sample", {"num_neighbors": 2}, lambda p: [p.node_ids[:2]],
                           "ProtocolError",
                           "'sample' lacks the required arguments ['edge_types']"),
    "arguments not a map": ("degree", [1, 2], lambda p: [], "ProtocolError",
                            "args must be a map"),
    "unknown attribute": ("get", {"groups": [{"attrs": ["x", "secret"]}]},
                          lambda p: [p.node_ids[:2]],
                          "StoreError", "unknown feature(s) ['secret']"),
    "attrs not a list": ("get", {"groups": [{"attrs": "x"}]}, lambda p: [p.node_ids[:2]],
                         "ProtocolError", "'get' argument 'groups'[0].attrs must be a list"),
    "fan-out below -1": ("sample", {"edge_types": [None], "num_neighbors": -5},
                         lambda p: [p.node_ids[:2]],
                         "ProtocolError", "'num_neighbors'"),
    "fan-out not an int": ("sample", {"edge_types": [None], "num_neighbors": "ten"},
                           lambda p: [p.node_ids[:2]],
                           "ProtocolError", "'num_neighbors'"),
    "replace not a bool": ("sample", {"edge_types": [None], "num_neighbors": 2, "replace": 1},
                           lambda p: [p.node_ids[:2]], "ProtocolError", "'replace'"),
    "unknown edge type": ("edge_index", {"edge_type": ["a", "b", "c"]}, lambda p: [],
                          "StoreError", "no edge type"),
    "unknown op": ("drop", {}, lambda p: [], "ProtocolError", "unknown op 'drop'"),
    # 2**31 draws with replacement would be a 16 GiB answer: refused up front.
    "answer over the reply limit": ("sample",
                                    {"edge_types": [None], "num_neighbors": 1 << 31,
                                     "replace": True},
                                    lambda p: [p.node_ids[:1]], "ProtocolError",
                                    "over this server's reply limit"),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_invalid_request_gets_error_reply(cora_cluster, part0, name):
    op, args, make, remote_type, fragment = BAD_REQUESTS[name]
    with RawDealer(cora_cluster.endpoints[0]) as dealer:
        reply = dealer.call(41, op, args, make(part0))
        assert isinstance(reply, ErrorReply)
        assert reply.type == remote_type
        assert fragment in reply.message
        _still_serving(dealer, part0)


def test_malformed_frames_get_error_replies(cora_cluster, part0):
    rng = random.Random(3)
    good = encode_request(9, "get", {"groups": [{"attrs": ["x"]}]}, [part0.node_ids[:4]])
    head = bytes(good[0])
    cases = [
        ([rng.randbytes(100)], "not valid msgpack"),
        ([head[: len(head) - 5], bytes(good[1])], "not valid msgpack"),
        ([header(9, "get", {"groups": [{"attrs": ["x"]}]}, [["int64", [5]]]), bytes(good[1])],
         "need 40 bytes but the frame holds 32"),
        ([header(9, "get", {"groups": [{"attrs": ["x"]}]}, [["pickle", [4]]]), bytes(good[1])],
         "not allowed"),
        # Two frames within ZeroMQ's MAXMSGSIZE (the limit), together over it.
        ([header(9, "get", {"groups": [{"attrs": ["x"]}]},
                 [["uint8", [MAX_MESSAGE_BYTES // 2 + 1]]] * 2),
          bytes(MAX_MESSAGE_BYTES // 2 + 1), bytes(MAX_MESSAGE_BYTES // 2 + 1)],
         "exceeds this server's limit"),
    ]
    with RawDealer(cora_cluster.endpoints[0]) as dealer:
        for frames, fragment in cases:
            head_reply, tensors = dealer.request(frames)
            assert head_reply["status"] == "error", frames[:1]
            assert head_reply["error"]["type"] == "ProtocolError"
            assert fragment in head_reply["error"]["message"]
            assert tensors == []
            _still_serving(dealer, part0)


@pytest.mark.parametrize("table", [True, False], ids=["id-table", "binary-search"])
def test_both_id_lookups_answer_and_refuse_alike(cora2_root, cora_reader, monkeypatch, table):
    # Graphs past TABLE_MAX_NODES look ids up by binary search instead of a
    # table; the answers and the refusals must not depend on which.
    from pyg_dist.errors import RemoteError
    from pyg_dist.rpc import RpcClient
    from pyg_dist.server import PartitionServer, requests

    if not table:
        monkeypatch.setattr(requests, "TABLE_MAX_NODES", 0)
    part = cora_reader.load_part(0)
    picked = [7, 0, 7, 42]
    with PartitionServer(cora2_root, 0) as server, RpcClient([server.endpoint]) as client:
        assert (server.ops._index(None).table is not None) == table
        reply = client.call(0, "get", {"groups": [{"attrs": ["x"]}]}, [part.node_ids[picked]])
        assert torch.equal(reply.tensors[0], part.node_features["x"][picked])
        sampled = client.call(0, "sample", {"edge_types": [None], "num_neighbors": -1},
                              [part.node_ids[picked]])
        degree = part.indptr[1:] - part.indptr[:-1]
        assert sampled.tensors[0].tolist() == degree[picked].tolist()
        for ids, message in (([0, -3], "must lie in [0, 2708)"),
                             ([2708], "must lie in [0, 2708)"),
                             ([_not_owned(part)], "not owned by this part")):
            for op, args in (("get", {"groups": [{"attrs": ["x"]}]}),
                             ("sample", {"edge_types": [None], "num_neighbors": 2})):
                with pytest.raises(RemoteError, match=re.escape(message)) as info:
                    client.call(0, op, args, [torch.tensor(ids)])
                assert info.value.remote_type == "StoreError"
