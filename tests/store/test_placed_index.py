"""A placed ``get`` reads its ids and output rows from the trainer's output
segment (``place.index``) instead of its socket: real server processes on
127.0.0.1, real segments."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
from support.shm_files import needs_shm
from torch_geometric.data import TensorAttr

from pyg_dist.errors import RemoteError
from pyg_dist.partitioning.writer import partition
from pyg_dist.routing.row_fetch import _placed_first, row_request
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.rpc.shm.outputs import OutputPool
from pyg_dist.server import PartitionServer
from pyg_dist.server.node_features import PLACED_CHARGE

pytestmark = needs_shm


class _Info(NamedTuple):
    """An attribute's dtype and row shape, as ``row_request`` takes them."""

    dtype: torch.dtype
    shape: tuple


@pytest.fixture
def lease_of(store, data):
    """A lease on part 0 with room for 200 ids (and their rows); the pool
    is closed and the server told to unmap it afterwards."""
    pool = OutputPool(64 << 20, [0])
    try:
        yield pool.lease([(torch.float32, (300, data.x.size(1)))], index_ids=200)
    finally:
        for part, keys in pool.close().items():
            store.router.client.call(part, "release", {"segments": keys})


def _part0_ids(store, data, count=200):
    return store.router.split(torch.arange(data.num_nodes))[0][2][:count]


def test_a_placed_get_sends_no_tensors_and_equals_the_copy(data, store):
    ids = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(3))[:2000]
    # The whole path: every row placed, none copied, the same rows.
    for _ in range(2):
        x, y = store.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "y", ids)])
        assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
    # What such a batch sends each server: its share in the segment.
    shares = store.router.split(ids)
    infos = [_Info(data.x.dtype, tuple(data.x.shape[1:]))]
    request = row_request("get", {"groups": [{"group": None, "attrs": ["x"]}]}, ["x"],
                          infos, ids.numel(), shares, [None] * 3, False,
                          store.router._outputs)
    first = _placed_first([(shares[0][0], shares[0][1], request, shares[0][2], 0)])
    assert first.tensors == [] and first.args["place"]["index"]["count"] == \
        shares[0][2].numel()
    assert store.router._outputs.parts == {0, 1, 2}


def test_the_ids_and_rows_in_the_segment_are_served(data, store, lease_of):
    ids = _part0_ids(store, data)
    index = lease_of.index_share(ids, torch.arange(100, 300))
    reply = store.router.client.call(0, "get", {
        "groups": [{"group": None, "attrs": ["x"]}],
        "place": {**lease_of.arg(0), "index": index}}, [])
    assert reply.result["placed"] is True and not reply.tensors
    assert torch.equal(lease_of.tensors[0][100:], data.x[ids])
    assert lease_of.index_share(ids[:1], torch.zeros(1, dtype=torch.long)) is None  # full


@pytest.mark.parametrize("case", ["count beyond the segment", "misaligned offset",
                                  "negative offset", "bool count", "extra key", "not a map",
                                  "index and tensors", "position too big in the segment",
                                  "foreign id in the segment"])
def test_hostile_indexes_are_refused_and_the_server_keeps_serving(data, store, lease_of,
                                                                  case):
    client = store.router.client
    ids = _part0_ids(store, data)
    index = lease_of.index_share(ids, torch.arange(100, 300))
    place, tensors = {**lease_of.arg(0), "index": dict(index)}, []
    if case == "count beyond the segment":
        place["index"]["count"] = lease_of.segment.size // 16
    elif case == "misaligned offset":
        place["index"]["offset"] += 4
    elif case == "negative offset":
        place["index"]["offset"] = -8
    elif case == "bool count":
        place["index"]["count"] = True
    elif case == "extra key":
        place["index"]["rows"] = 3
    elif case == "not a map":
        place["index"] = [index["offset"], index["count"]]
    elif case == "index and tensors":
        tensors = [ids, torch.arange(100, 300)]
    elif case == "position too big in the segment":
        lease_of._index[200 + 7] = 300
    elif case == "foreign id in the segment":
        lease_of._index[3] = _other_part_id(store, data)
    before = lease_of.tensors[0].clone()
    with pytest.raises(RemoteError) as info:
        client.call(0, "get", {"groups": [{"group": None, "attrs": ["x"]}], "place": place},
                    tensors)
    assert info.value.remote_type in ("ProtocolError", "SharedMemoryError", "StoreError")
    assert torch.equal(lease_of.tensors[0], before)  # nothing written
    # The server still serves, in place too.
    lease_of._index[:400] = torch.cat([ids, torch.arange(100, 300)])
    reply = client.call(0, "get", {"groups": [{"group": None, "attrs": ["x"]}],
                                   "place": {**lease_of.arg(0), "index": index}}, [])
    assert reply.result["placed"] is True
    assert torch.equal(lease_of.tensors[0][100:], data.x[ids])


def _other_part_id(store, data):
    return int(store.router.split(torch.arange(data.num_nodes))[1][2][0])


def test_a_placed_get_is_estimated_by_the_bytes_it_writes(data, tmp_path):
    # What routes a big placement to a worker (over inline_reply_bytes), as
    # when its ids made the request too big to serve inline; capped, since
    # no reply holds those bytes.
    root = str(tmp_path / "parts")
    partition(data, 1, root)
    with PartitionServer(root, 0) as server:
        get_bytes = server.ops.estimators()["get"]
        groups = [{"group": None, "attrs": ["x"]}]
        row = data.x.size(1) * 4
        place = {"shm": {}, "offsets": [0], "rows": 10}
        assert get_bytes({"groups": groups, "place": {**place, "index": {
            "offset": 0, "count": 10}}}, []) == 10 * row
        assert get_bytes({"groups": groups, "place": place},
                         [torch.arange(10), torch.arange(10)]) == 10 * row
        assert get_bytes({"groups": groups, "place": {**place, "index": {
            "offset": 0, "count": 10**6}}}, []) == PLACED_CHARGE
        assert get_bytes({"groups": groups, "place": {**place, "index": {
            "offset": 0, "count": True}}}, []) == 0


def test_a_small_reply_budget_bounds_the_placed_charge(data, tmp_path):
    # A charge over the client's whole budget would refuse, as never
    # fitting, a placement that holds no reply at all.
    root = str(tmp_path / "parts")
    partition(data, 1, root)
    config = RpcConfig(client_reply_budget=256 << 10, max_reply_bytes=64 << 10)
    with PartitionServer(root, 0, config=config) as server, \
            RpcClient([server.endpoint], config) as client:
        get_bytes = server.ops.estimators()["get"]
        place = {"shm": {}, "offsets": [0], "rows": 10**6,
                 "index": {"offset": 0, "count": 10**6}}
        assert get_bytes({"groups": [{"group": None, "attrs": ["x"]}], "place": place},
                         []) == 256 << 10
        pool = OutputPool(64 << 20, [0])
        try:
            ids = torch.arange(data.num_nodes)
            lease = pool.lease([(torch.float32, (ids.numel(), data.x.size(1)))],
                               index_ids=ids.numel())
            index = lease.index_share(ids, ids)  # 15 MB of rows: over the budget
            reply = client.call(0, "get", {"groups": [{"group": None, "attrs": ["x"]}],
                                           "place": {**lease.arg(0), "index": index}}, [])
            assert reply.result["placed"] is True
            assert torch.equal(lease.tensors[0], data.x)
        finally:
            lease = None
            for part, keys in pool.close().items():
                client.call(part, "release", {"segments": keys})
