"""Bounded resources on a real ``pyg-dist serve`` process.

Covered elsewhere (not repeated here): the request size limit and frames
beyond ZeroMQ's ``MAXMSGSIZE`` (``tests/rpc/test_rpc_malformed_frames.py``),
the per-client bound on calls in flight
(``tests/rpc/test_rpc_client_server.py``), the prefetch depth
(``tests/loader/test_prefetch_pipeline.py``).

Here: the size of a *reply* is bounded before anything is allocated
(``RpcConfig.max_reply_bytes``), and replies a client does not read do not
pile up in the server beyond ``RpcConfig.reply_hwm`` per client, and a busy
server pushes back on a client instead of buffering its requests
(``RpcConfig.max_queued`` bounds libzmq's receive queue too).
"""

from __future__ import annotations

import threading

import psutil
import torch
import zmq
from support.handlers import HANDLERS
from support.rawzmq import RawDealer, gets_answered, header
from support.waiting import wait_until

from pyg_dist.rpc import RpcConfig, RpcServer
from pyg_dist.rpc.wire_format import ErrorReply, encode_request


def test_sample_whose_answer_exceeds_the_limit_is_refused_before_allocating(part0_server, part0):
    proc, endpoint = part0_server
    degree = part0.indptr[1:] - part0.indptr[:-1]
    seed = part0.node_ids[degree > 0][:1]
    with RawDealer(endpoint, timeout=60) as dealer:
        reply = dealer.call(1, "sample", {"edge_types": [None], "num_neighbors": 1 << 31,
                                          "replace": True}, [seed])
    assert proc.poll() is None
    assert isinstance(reply, ErrorReply)
    # Before max_reply_bytes: RuntimeError "DefaultCPUAllocator: can't
    # allocate memory: you tried to allocate 17179869184 bytes" (and that
    # only thanks to the conftest's rlimit).
    assert reply.type == "ProtocolError", reply
    assert "reply limit" in reply.message


def test_a_huge_fan_out_over_a_small_answer_is_served(part0_server, part0):
    # k per seed bounds the answer far past the limit; the exact count (every
    # neighbour of these low-degree seeds) is small, so the call is served.
    proc, endpoint = part0_server
    degree = part0.indptr[1:] - part0.indptr[:-1]
    local = torch.nonzero((degree > 0) & (degree < 5)).view(-1)[:8]
    with RawDealer(endpoint, timeout=60) as dealer:
        reply = dealer.call(2, "sample", {"edge_types": [None], "num_neighbors": 1 << 31},
                            [part0.node_ids[local]])
    assert not isinstance(reply, ErrorReply), reply
    counts = reply.tensors[0]
    assert counts.tolist() == degree[local].tolist()
    assert proc.poll() is None


def test_replies_a_client_does_not_read_do_not_pile_up_in_the_server(part0_server, part0):
    proc, endpoint = part0_server
    ids = part0.node_ids[torch.arange(1000) % part0.node_ids.numel()]
    reply_bytes = ids.numel() * part0.node_features["x"][0].numel() * 4
    requests = 160  # 8 KB each, 5.5 MiB answers: 880 MiB if all were kept
    before = psutil.Process(proc.pid).memory_info().rss
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.rcvhwm = 1  # this client stops reading: TCP pushes back on the server
    sock.setsockopt(zmq.RCVBUF, 4096)
    try:
        with RawDealer(endpoint, timeout=60) as other:
            answered = gets_answered(other) + requests + 1
            sock.connect(endpoint)
            for i in range(requests):
                sock.send_multipart(encode_request(i, "get", {"groups": [{"attrs": ["x"]}]}, [ids]))
            # Another client is served meanwhile (inline: it does not wait
            # for the workers' queue).
            for i in range(requests):
                assert not isinstance(other.call(1000 + i, "ping"), ErrorReply)
            _ = other.call(5000, "get", {"groups": [{"attrs": ["x"]}]}, [ids[:3]])
            # Every reply has been built before RSS is read: measured
            # earlier, a server that kept them all would pass.
            wait_until(lambda: gets_answered(other) >= answered, 60,
                       f"the server to answer the {requests} gets of the client that "
                       f"does not read")
        grown = psutil.Process(proc.pid).memory_info().rss - before
    finally:
        sock.close()
        ctx.term()
    print(f"\nserver RSS grew {grown / 2**20:.0f} MiB holding replies for a client that "
          f"does not read ({requests} x {reply_bytes / 2**20:.1f} MiB)")
    assert proc.poll() is None
    # Bounded: about REPLY_HWM replies (plus socket buffers), not all of them.
    assert grown < requests * reply_bytes / 2


def test_a_busy_server_pushes_back_instead_of_buffering_every_request():
    """With its only worker busy and its inbox full, the server must stop
    taking requests in: the client's sends block (TCP back-pressure). Here
    an in-process RpcServer (the same class ``pyg-dist serve`` runs), with
    every request served by the worker (``inline_bytes=0``): served inline,
    the held request would block the I/O thread itself, and the test would
    pass without the inbox's bound."""
    config = RpcConfig(workers=1, max_queued=1, timeout=10.0, inline_bytes=0)
    flood, chunk = 2000, bytes(64 << 10)  # 125 MiB if the server takes it all
    accepted = 0
    holding, release = threading.Event(), threading.Event()

    def hold(args, tensors):
        holding.set()
        release.wait(30)  # bounded: a failed test cannot keep the worker
        return {}, []

    first = [header(1, "hold")]  # occupies the worker
    second = [header(2, "echo")]  # fills the inbox
    in_inbox = sum(map(len, first + second))
    with RpcServer({**HANDLERS, "hold": hold}, config=config) as srv:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.sndhwm = 1
        sock.sndtimeo = 1000  # a send blocked this long means back-pressure
        try:
            sock.connect(srv.endpoint)
            sock.send_multipart(first)
            sock.send_multipart(second)
            assert holding.wait(10), "the worker never started the held request"
            wait_until(lambda: srv.budget_usage()["queued_bytes"] == in_inbox, 10,
                       "the second request to wait in the inbox")
            spec = [["uint8", [len(chunk)]]]
            try:
                for i in range(flood):
                    sock.send_multipart([header(10 + i, "echo", {}, spec), chunk])
                    accepted += 1
            except zmq.Again:
                pass
            release.set()
            # Everything taken in is served (nothing lost), and the server
            # is idle again before it is stopped.
            sock.rcvtimeo = 30_000
            for _ in range(accepted + 2):
                sock.recv_multipart()
        finally:
            release.set()
            sock.close()
            ctx.term()
    print(f"\na busy server took in {accepted} requests of 64 KiB "
          f"({accepted * 64 / 1024:.0f} MiB) before the client's send blocked")
    # Socket buffers on both ends hold a few MiB; everything beyond is the
    # server buffering without bound.
    assert accepted < flood // 2
