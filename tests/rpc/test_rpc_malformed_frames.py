"""Hostile frames sent with a bare DEALER: error replies, and the server keeps
serving (a valid request afterwards is answered correctly)."""

from __future__ import annotations

import random

import msgpack
import pytest
import torch
import zmq
from support.handlers import HANDLERS
from support.rawzmq import RawDealer, header

from pyg_dist.rpc import RpcConfig, RpcServer
from pyg_dist.rpc.wire_format import PROTOCOL_VERSION, ErrorReply, encode_request

LIMIT = 64 * 1024


@pytest.fixture
def small_server():
    srv = RpcServer(HANDLERS, config=RpcConfig(workers=2, max_message_bytes=LIMIT))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _assert_still_serving(dealer, req_id=1000):
    x = torch.arange(10, dtype=torch.float32)
    reply = dealer.call(req_id, "add", {"k": 2}, [x])
    assert not isinstance(reply, ErrorReply), reply
    assert torch.equal(reply.tensors[0], x + 2)


GOOD = header(5, "add", {"k": 1}, [["float32", [4]]])

MALFORMED = {
    "random bytes": ([random.Random(0).randbytes(64)], None, "not valid msgpack"),
    # The id, read from the first bytes, is echoed although the rest is cut.
    "truncated header": ([GOOD[: len(GOOD) // 2], b"\0" * 16], 5, "not valid msgpack"),
    "header not a map": ([msgpack.packb("hello")], None, "must be a map"),
    "unknown op": ([header(6, "drop_tables")], 6, "unknown op 'drop_tables'"),
    "wrong dtype": ([header(7, "add", {"k": 1}, [["complex64", [4]]]), b"\0" * 32], 7,
                    "dtype 'complex64' is not allowed"),
    "shape lies about byte count": ([header(8, "add", {"k": 1}, [["float32", [100]]]),
                                     b"\0" * 16], 8, "need 400 bytes but the frame holds 16"),
    "negative shape": ([header(9, "add", {"k": 1}, [["float32", [-4]]]), b"\0" * 16], 9,
                       "non-negative"),
    "missing tensor frame": ([header(10, "add", {"k": 1}, [["float32", [4]]])], 10,
                             "declares 1 tensors but 0"),
    "other protocol version": (
        [msgpack.packb({"version": PROTOCOL_VERSION + 1, "id": 11, "op": "add"})], 11,
        f"unsupported protocol version {PROTOCOL_VERSION + 1}"),
    # Each frame within ZeroMQ's MAXMSGSIZE (the limit), together over it.
    "oversize request": ([header(12, "echo", {}, [["uint8", [LIMIT // 2 + 10]]] * 2),
                          b"\0" * (LIMIT // 2 + 10), b"\0" * (LIMIT // 2 + 10)], 12,
                         "exceeds this server's limit"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_request_gets_error_reply_and_server_keeps_serving(small_server, name):
    frames, want_id, match = MALFORMED[name]
    with RawDealer(small_server.endpoint) as dealer:
        head, tensors = dealer.request(frames)
        assert head["status"] == "error"
        assert head["id"] == want_id
        assert head["error"]["type"] == "ProtocolError"
        assert match in head["error"]["message"]
        assert tensors == []
        _assert_still_serving(dealer)


def test_handler_refusal_for_bad_args_is_an_error_reply(small_server):
    with RawDealer(small_server.endpoint) as dealer:
        head, _ = dealer.request([header(3, "add", {}, [["float32", [1]]]), b"\0" * 4])
        assert head["status"] == "error" and head["error"]["type"] == "KeyError"
        _assert_still_serving(dealer)


def test_grossly_oversized_frame_is_dropped_by_zmq_and_others_still_served(small_server):
    with RawDealer(small_server.endpoint, timeout=0.5) as hostile:
        # Beyond ZeroMQ's MAXMSGSIZE (the limit): libzmq cuts the peer off.
        hostile.send([header(1, "echo", {}, [["uint8", [LIMIT + 1]]]), b"\0" * (LIMIT + 1)])
        with pytest.raises(zmq.Again):
            hostile.recv()
    with RawDealer(small_server.endpoint) as other:
        _assert_still_serving(other)


def test_many_garbage_messages_interleaved_with_valid_ones(small_server):
    with RawDealer(small_server.endpoint) as dealer:
        rng = random.Random(1)
        for i in range(50):
            dealer.send([rng.randbytes(1 + i)])
        head_ids = set()
        for _ in range(50):
            head, _ = dealer.recv()
            assert head["status"] == "error"
            head_ids.add(head["id"])
        assert head_ids == {None}
        _assert_still_serving(dealer)


def test_replies_to_a_client_that_does_not_read_are_dropped_not_hoarded(caplog):
    config = RpcConfig(workers=2, reply_hwm=2, max_message_bytes=LIMIT)
    with RpcServer(HANDLERS, config=config) as srv:
        ctx = zmq.Context()
        lazy = ctx.socket(zmq.DEALER)
        lazy.linger = 0
        lazy.rcvhwm = 1
        lazy.setsockopt(zmq.RCVBUF, 4096)
        try:
            lazy.connect(srv.endpoint)
            payload = torch.zeros(LIMIT // 8, dtype=torch.int64)  # 64 KiB echoed back
            with caplog.at_level("WARNING", logger="pyg_dist.rpc.server"):
                for i in range(200):
                    lazy.send_multipart(encode_request(i, "echo", {}, [payload]))
                with RawDealer(srv.endpoint) as other:
                    for i in range(200):  # FIFO workers: the lazy requests are done
                        assert not isinstance(other.call(10_000 + i, "echo"), ErrorReply)
        finally:
            lazy.close()
            ctx.term()
    assert any("does not read its replies" in r.getMessage() for r in caplog.records)
