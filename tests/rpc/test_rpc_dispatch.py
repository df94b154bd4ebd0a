"""Inline versus worker dispatch: small requests are served on the server's
I/O thread, big ones by workers; both answer correctly and stop() is clean
during either."""

from __future__ import annotations

import threading

import pytest
import torch
from support.handlers import HANDLERS, SLOW_RUNNING

from pyg_dist.errors import RemoteError, RpcError
from pyg_dist.rpc import RpcClient, RpcConfig, RpcServer

INLINE = 4096


def where(args, tensors):
    """Names the thread that serves the call, and adds one to its tensor."""
    return {"thread": threading.current_thread().name}, [t + 1 for t in tensors]


def _threads(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(name)]


@pytest.fixture
def dispatch_server():
    config = RpcConfig(workers=2, inline_bytes=INLINE, timeout=10.0)
    srv = RpcServer({**HANDLERS, "where": where}, config=config, name="dispatch")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_small_requests_are_served_inline_and_big_ones_by_workers(dispatch_server):
    small = torch.arange(8, dtype=torch.int64)  # 64 bytes + header
    big = torch.arange(INLINE, dtype=torch.int64)  # 32 KiB
    with RpcClient([dispatch_server.endpoint]) as client:
        futures = [client.call_async(0, "where", {}, [small if i % 2 else big])
                   for i in range(40)]
        replies = [f.result(timeout=30) for f in futures]
    for i, reply in enumerate(replies):
        want = small if i % 2 else big
        assert torch.equal(reply.tensors[0], want + 1)
        if i % 2:
            assert reply.result["thread"] == "dispatch-io"
        else:
            assert reply.result["thread"].startswith("dispatch-worker-")


def test_inline_bytes_zero_sends_everything_to_the_workers():
    config = RpcConfig(workers=1, inline_bytes=0)
    with RpcServer({"where": where}, config=config, name="all-workers") as srv:
        with RpcClient([srv.endpoint]) as client:
            reply = client.call(0, "where")
    assert reply.result["thread"] == "all-workers-worker-0"


def test_inline_requests_are_validated_and_failures_become_error_replies(dispatch_server):
    with RpcClient([dispatch_server.endpoint]) as client:
        with pytest.raises(RemoteError, match="unknown op 'nope'") as unknown:
            client.call(0, "nope")
        with pytest.raises(RemoteError, match="boom") as refused:
            client.call(0, "boom", {"msg": "boom"})
        with pytest.raises(RemoteError, match="handler bug"):
            client.call(0, "crash")
        assert client.call(0, "echo", {"still": "serving"}).result == {
            "args": {"still": "serving"}}
    assert unknown.value.remote_type == "ProtocolError"
    assert refused.value.remote_type == "ValueError"


def test_workers_replies_are_forwarded_while_small_requests_stream_in(dispatch_server):
    big = torch.randn(2 * INLINE)
    with RpcClient([dispatch_server.endpoint]) as client:
        slow = client.call_async(0, "slow", {"s": 0.2}, [torch.zeros(INLINE)])  # a worker
        bigs = [client.call_async(0, "add", {"k": k}, [big]) for k in range(8)]
        smalls = [client.call_async(0, "add", {"k": k}, [torch.ones(4)]) for k in range(200)]
        for k, fut in enumerate(smalls):
            assert torch.equal(fut.result(timeout=30).tensors[0], torch.ones(4) + k)
        for k, fut in enumerate(bigs):
            assert torch.equal(fut.result(timeout=30).tensors[0], big + k)
        assert slow.result(timeout=30).result == {"slept": 0.2}


@pytest.mark.parametrize("inline", [True, False])
def test_stop_during_a_running_handler_drops_its_reply_and_joins_every_thread(inline):
    name = f"stop-{'inline' if inline else 'worker'}"
    config = RpcConfig(workers=1, inline_bytes=1 << 20 if inline else 0)
    server = RpcServer(HANDLERS, config=config, name=name)
    server.start()
    client = RpcClient([server.endpoint], RpcConfig(timeout=2.0))
    try:
        future = client.call_async(0, "slow", {"s": 1.0})
        # The handler is inside its call when the server is told to stop.
        assert SLOW_RUNNING.wait(timeout=10)
        server.stop(timeout=3.0)
        with pytest.raises(RpcError):  # its reply was dropped: a typed timeout
            future.result(timeout=30)
    finally:
        client.close()
        server.stop()
    assert _threads(name) == []


def test_inline_bytes_comes_from_the_environment():
    assert RpcConfig.from_env({"PYG_DIST_INLINE_BYTES": "123"}).inline_bytes == 123
    with pytest.raises(RpcError, match="inline_bytes"):
        RpcConfig(inline_bytes=-1)


def test_worker_ops_go_to_a_worker_however_small_the_request():
    config = RpcConfig(workers=1, inline_bytes=1 << 20)
    with RpcServer({"where": where, "heavy": where}, config=config, name="wops",
                   worker_ops={"heavy"}) as srv:
        with RpcClient([srv.endpoint]) as client:
            assert client.call(0, "where").result["thread"] == "wops-io"
            assert client.call(0, "heavy").result["thread"] == "wops-worker-0"
