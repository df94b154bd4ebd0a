"""Same-host servers write a batch's rows straight into its outputs, which
lie in shared memory the trainer lends them all (pyg_dist.rpc.shm.outputs):
real server processes on 127.0.0.1, real segments in /dev/shm."""

from __future__ import annotations

import gc

import pytest
import torch
from support.one_hop import one_hop
from support.shm_files import descriptor_open, has_file, needs_shm
from torch_geometric.data import TensorAttr

from pyg_dist.errors import RemoteError
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.shm.outputs import OutputPool
from pyg_dist.store.connect import connect

pytestmark = needs_shm


def _fetch(fs, ids):
    return fs.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "y", ids)])


def _ids(data, count, seed=0):
    return torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(seed))[:count]


def _lent_reply_bytes(fs):
    return sum(p.held_bytes for p in fs.router.client.transport._lender._pools.values())


def _in_pool(tensor, pool):
    ptr = tensor.data_ptr()
    for segment in pool._all:
        start = segment.payload.data_ptr()
        if start <= ptr < start + segment.size:
            return True
    return False


def test_every_same_host_server_writes_its_rows_in_place(data, store):
    for seed in range(3):  # the first batch maps the segment, the next ones reuse it
        ids = _ids(data, 2000, seed)
        x, y = _fetch(store, ids)
        assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
        del x, y
    pool = store.router._outputs
    assert pool.parts == {0, 1, 2} and len(pool._all) == 1
    x, y = _fetch(store, _ids(data, 2000, 9))
    assert _in_pool(x, pool) and _in_pool(y, pool)
    assert _lent_reply_bytes(store) == 0  # no rows came through lent replies
    # Closed once all three servers mapped it (and a memfd has no file).
    assert all(not descriptor_open(s) and not has_file(s) for s in pool._all)


def test_a_server_on_another_host_sends_its_rows_the_usual_way(data, endpoints):
    fs, _ = connect(endpoints)
    try:
        fs.server_hosts[1] = "another-host"  # as its meta would say
        ids = _ids(data, 2500)
        for _ in range(2):
            x, y = _fetch(fs, ids)
            assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
        assert fs.router._outputs.parts == {0, 2}
    finally:
        fs.close()
    tcp, _ = connect(endpoints, RpcConfig(shared_memory_bytes=0))
    try:
        x, y = _fetch(tcp, ids)
        assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
        assert tcp.router._outputs is False  # nothing lent at all
    finally:
        tcp.close()


def test_a_held_batch_keeps_its_segment_and_a_dropped_one_gives_it_back(data, store):
    first_ids, second_ids = _ids(data, 2000, 1), _ids(data, 2000, 2)
    x1, y1 = _fetch(store, first_ids)
    pool = store.router._outputs
    held = pool.held_bytes
    head = x1[:5]  # a view of the batch outlives the batch
    del y1
    x2, _ = _fetch(store, second_ids)  # x1 is held: written elsewhere
    assert torch.equal(x1, data.x[first_ids]) and torch.equal(x2, data.x[second_ids])
    assert pool.held_bytes == 2 * held and pool.free_segments == 0
    del x1
    gc.collect()
    assert pool.free_segments == 0  # `head` still views it
    del head
    gc.collect()
    assert pool.free_segments == 1
    x3, _ = _fetch(store, first_ids)
    assert pool.held_bytes == 2 * held and pool.free_segments == 0  # reused, not made
    assert torch.equal(x3, data.x[first_ids]) and torch.equal(x2, data.x[second_ids])


def test_a_server_that_lost_the_segment_is_asked_again(data, store):
    ids = _ids(data, 2000)
    x, y = _fetch(store, ids)
    pool = store.router._outputs
    (segment,) = pool._all
    del x, y
    gc.collect()
    # What a restarted server looks like: the segment is not mapped any more.
    reply = store.router.client.call(0, "release", {"segments": [segment.key]})
    assert reply.result["released"] == 1
    x, y = _fetch(store, ids)  # part 0's rows come through a reply instead
    assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
    del x, y
    gc.collect()
    assert segment not in pool._all  # given up, not reused
    assert pool.places(0)  # once is not enough to stop placing
    x, y = _fetch(store, ids)
    assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
    assert pool.parts == {0, 1, 2}


def _placed_get(client, ids, positions, place, attrs=("x",)):
    return client.call(0, "get",
                       {"groups": [{"group": None, "attrs": list(attrs)}], "place": place},
                       [ids, positions])


@pytest.mark.parametrize("case", ["position too big", "negative position", "int32 positions",
                                  "too few positions", "rows beyond the segment",
                                  "offset beyond the segment", "misaligned offset",
                                  "wrong token", "lying segment size", "no offsets",
                                  "one tensor", "two groups"])
def test_hostile_placements_are_refused_and_the_server_keeps_serving(data, store, case):
    client = store.router.client
    part_ids = store.router.split(torch.arange(data.num_nodes))[0][2][:200]
    pool = OutputPool(64 << 20, [0])
    lease = pool.lease([(torch.float32, (300, data.x.size(1)))])
    try:
        place, positions = lease.arg(0), torch.arange(200, dtype=torch.long)
        tensors = [part_ids, positions]
        if case == "position too big":
            positions[7] = 300
        elif case == "negative position":
            positions[0] = -1
        elif case == "int32 positions":
            tensors[1] = positions.to(torch.int32)
        elif case == "too few positions":
            tensors[1] = positions[:-1]
        elif case == "rows beyond the segment":
            place["rows"] = lease.segment.size  # rows of 5.7 KB each
        elif case == "offset beyond the segment":
            place["offsets"] = [lease.segment.size - 64]
        elif case == "misaligned offset":
            place["offsets"] = [2]
        elif case == "wrong token":
            place["shm"]["token"] = "0" * 32
        elif case == "lying segment size":
            place["shm"]["size"] = 2 * lease.segment.size  # to write past its end
        elif case == "no offsets":
            del place["offsets"]
        elif case == "one tensor":
            tensors = tensors[:1]
        groups = [{"group": None, "attrs": ["x"]}] * (2 if case == "two groups" else 1)
        sizes = {"sizes": [100, 100]} if case == "two groups" else {}
        before = lease.tensors[0].clone()
        with pytest.raises(RemoteError):
            client.call(0, "get", {"groups": groups, "place": place, **sizes}, tensors)
        assert torch.equal(lease.tensors[0], before)  # nothing written
        # The server still serves, in place too.
        good = lease.arg(0)
        reply = _placed_get(client, part_ids, torch.arange(100, 300), good)
        assert reply.result["placed"] is True and not reply.tensors
        assert torch.equal(lease.tensors[0][100:], data.x[part_ids])
    finally:
        lease = None
        for part, keys in pool.close().items():
            client.call(part, "release", {"segments": keys})


def test_the_pool_stays_within_its_limit():
    pool = OutputPool(4 << 20, [0])
    first = pool.lease([(torch.float32, (1000, 512))])  # 2 MB: a 3 MiB segment
    assert first is not None and pool.held_bytes == 3 << 20
    # Its own segment only: other processes (a server stopping, another run on
    # the machine) may add or remove segments of theirs meanwhile.
    mine = first.segment
    assert descriptor_open(mine) and not has_file(mine)
    assert pool.lease([(torch.float32, (1000, 512))]) is None  # over the limit: copy
    first = None
    gc.collect()
    again = pool.lease([(torch.float32, (10, 512)), (torch.int64, (10,))])
    assert again is not None and pool.held_bytes == 3 << 20  # the same one
    assert again.tensors[1].data_ptr() % 64 == 0
    pool.close()
    assert pool.lease([(torch.float32, (10, 512))]) is None
    again = None
    gc.collect()
    assert not descriptor_open(mine) and not has_file(mine)


def test_sampled_hops_come_through_lent_memory_and_outlive_it(data, endpoints):
    fs, gs = connect(endpoints)
    tcp_fs, tcp_gs = connect(endpoints, RpcConfig(shared_memory_bytes=0))
    try:
        client = gs.router.client
        for part in range(3):
            client.ping(part)  # hosts known: the next calls lend memory
        ids = _ids(data, 2000)
        first = one_hop(gs, ids, 10, False, seed=1)
        assert sum(p.held_bytes for p in client.transport._lender._pools.values()) > 0
        second = one_hop(gs, ids.flip(0), 10, False, seed=2)  # reuses the memory
        assert all(torch.equal(a, b) for a, b in zip(
            first, one_hop(tcp_gs, ids, 10, False, seed=1)))
        assert all(torch.equal(a, b) for a, b in zip(
            second, one_hop(tcp_gs, ids.flip(0), 10, False, seed=2)))
        # One owner answering in order: its tensors, copied before release.
        own = gs.router.split(torch.arange(data.num_nodes))[0][2][:1500]
        mine = one_hop(gs, own, 10, False, seed=4)
        one_hop(gs, own.flip(0), 10, False, seed=5)
        assert all(torch.equal(a, b) for a, b in zip(
            mine, one_hop(tcp_gs, own, 10, False, seed=4)))
        one = one_hop(gs, ids[:1000], -1, False, seed=3)  # unbounded: the socket
        assert all(torch.equal(a, b) for a, b in zip(
            one, one_hop(tcp_gs, ids[:1000], -1, False, seed=3)))
    finally:
        fs.close()
        tcp_fs.close()


def test_a_server_first_asked_after_the_segment_was_unlinked_gets_a_fresh_one(data, store):
    shares = store.router.split(torch.arange(data.num_nodes))
    not_two = torch.cat([ids[:800] for part, _, ids in shares if part != 2])
    x, y = _fetch(store, not_two)  # parts 0 and 1 map the segment; then it is unlinked
    assert torch.equal(x, data.x[not_two])
    pool = store.router._outputs
    (first,) = pool._all
    assert first.announced and not descriptor_open(first) and not has_file(first)
    del x, y
    gc.collect()
    ids = _ids(data, 2000)
    x, y = _fetch(store, ids)  # part 2 cannot map it: its rows come through a reply
    assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
    assert pool.parts == {0, 1, 2}  # not held against it
    del x, y
    gc.collect()
    assert first not in pool._all  # given up after that batch
    x, y = _fetch(store, ids)  # a fresh segment, mapped by all three
    assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
    (fresh,) = pool._all
    assert pool._mapped[fresh] == {0, 1, 2} and not descriptor_open(fresh)
