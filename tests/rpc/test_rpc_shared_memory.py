"""Shared memory as a transport of the RPC layer, on a real RpcServer on
127.0.0.1: a handler that takes its outputs from its call context answers
into memory the client lends when the call states ``reply_bytes`` and the
server shares the host, over the socket otherwise; the caller reads the same
tensors either way, and a segment is reused only once its reply is released."""

from __future__ import annotations

import gc

import pytest
import torch
import zmq

from pyg_dist.errors import ProtocolError
from pyg_dist.rpc import RpcClient, RpcConfig, RpcServer, wire_format
from pyg_dist.rpc.context import uses_context
from pyg_dist.rpc.shm import MIN_BYTES, host_id

pytestmark = pytest.mark.skipif(host_id() is None, reason="this host has no usable /dev/shm")

N = 1 << 14  # rows: 256 KiB of floats and 128 KiB of int64, well above MIN_BYTES
NBYTES = N * 4 * 4 + N * 8


@uses_context
def rows(args, tensors, ctx):
    n = args["n"]
    values, ids = ctx.alloc([(torch.float32, (n, 4)), (torch.int64, (n,))])
    torch.arange(4 * n, dtype=torch.float32, out=values.view(-1))
    torch.arange(n, out=ids)
    return {"lent": ctx.lent}, [values, ids]


def _expected(n):
    return torch.arange(4 * n, dtype=torch.float32).view(n, 4), torch.arange(n)


@pytest.fixture(scope="module")
def client():
    config = RpcConfig(workers=2, timeout=10.0)
    with RpcServer({"rows": rows}, config=config, name="shm-rpc") as srv:
        with RpcClient([srv.endpoint], config) as cli:
            yield cli


def _call(client, n, reply_bytes):
    return client.call_async(0, "rows", {"n": n}, reply_bytes=reply_bytes).result(timeout=10)


def test_a_reply_lands_in_lent_memory_and_reads_as_over_the_socket(client):
    plain = client.call(0, "rows", {"n": N})  # no reply_bytes: frames
    assert plain.shm is None and plain.result == {"lent": False}
    assert client.ping(0)["host"] == host_id()  # now it knows: it lends
    reply = _call(client, N, NBYTES)
    assert reply.result == {"lent": True} and reply.shm is not None
    for got, want in zip(reply.tensors, _expected(N)):
        assert torch.equal(got, want)
    pool = client._lender.pool(0)
    held = pool.held_bytes
    assert held > 0
    segment = next(iter(pool._all))
    assert reply.tensors[0].data_ptr() >= segment.payload.data_ptr()
    reply.release()
    again = _call(client, N // 2, NBYTES // 2)  # fits the same segment: reused
    assert again.shm is not None and pool.held_bytes == held
    assert torch.equal(again.tensors[1], torch.arange(N // 2))
    again.release()


def test_small_replies_travel_over_the_socket(client):
    client.ping(0)
    n = 16
    assert n * 24 < MIN_BYTES
    reply = _call(client, n, n * 24)
    assert reply.shm is None and reply.result == {"lent": False}
    assert torch.equal(reply.tensors[0], _expected(n)[0])
    reply.release()  # a no-op for frames


def test_a_reply_dropped_unreleased_gives_its_segment_up(client):
    client.ping(0)
    pool = client._lender.pool(0)
    pool.take_dropped()
    reply = _call(client, N, NBYTES)
    assert reply.shm is not None
    key = next(s.key for s in pool._all if s.payload.data_ptr() <= reply.tensors[0].data_ptr()
               < s.payload.data_ptr() + s.size)
    kept = reply.tensors[0]  # a view outliving its reply
    del reply
    gc.collect()
    assert key in pool.take_dropped()  # never reused: the server is told to unmap it
    assert torch.equal(kept, _expected(N)[0])  # and the view stays readable


def test_a_reply_into_memory_that_was_not_lent_is_refused():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        with RpcClient([f"tcp://127.0.0.1:{port}"], RpcConfig(timeout=10.0)) as cli:
            future = cli.call_async(0, "rows", {"n": 4})
            assert router.poll(10_000)
            identity, *frames = router.recv_multipart()
            request = wire_format.decode_request(frames, 1 << 20)
            router.send_multipart([identity, *wire_format.encode_reply(
                request.id, {}, [torch.zeros(4)], shm_offsets=[0])])
            with pytest.raises(ProtocolError, match="not lent"):
                future.result(timeout=10)
    finally:
        router.close()
        ctx.term()
