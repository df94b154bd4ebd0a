"""Bounded resources on a real ``pyg-dist serve`` process.

Covered elsewhere (not repeated here): the request size limit and frames
beyond ZeroMQ's ``MAXMSGSIZE`` (``tests/rpc/test_rpc_malformed_frames.py``),
the per-client bound on calls in flight
(``tests/rpc/test_rpc_client_server.py``), the prefetch depth
(``tests/loader/test_prefetch_pipeline.py``).

The two tests here are known failures (strict xfail), each with its fix in
``docs/reliability.md``: the size of a *reply* is not bounded, and replies a
client does not read pile up in the server without bound.
"""

from __future__ import annotations

import time

import psutil
import pytest
import torch
import zmq
from support.rawzmq import RawDealer
from support.servers import serve_part

from pyg_dist.partitioning import PartitionReader
from pyg_dist.rpc.protocol import ErrorReply, encode_request

LIMIT = 1 << 20  # --max-message-bytes
# The server gets an address-space limit so that the unbounded allocation
# below fails fast inside it instead of exhausting the test machine.
ADDRESS_SPACE_LIMIT = 6 << 30


@pytest.fixture(scope="module")
def part0(cora2_root):
    return PartitionReader(cora2_root).load_part(0)


@pytest.fixture(scope="module")
def server(cora2_root):
    args = ["--workers", "2", "--max-message-bytes", str(LIMIT)]
    with serve_part(cora2_root, 0, serve_args=args) as (proc, endpoint):
        psutil.Process(proc.pid).rlimit(psutil.RLIMIT_AS,
                                        (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
        yield proc, endpoint


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="ops.sample checks num_neighbors only against 2**31: with "
                          "replace=True one seed makes the server allocate 16 GiB")
def test_sample_whose_answer_exceeds_the_limit_is_refused_before_allocating(server, part0):
    proc, endpoint = server
    degree = part0.indptr[1:] - part0.indptr[:-1]
    seed = part0.node_ids[degree > 0][:1]
    with RawDealer(endpoint, timeout=60) as dealer:
        reply = dealer.call(1, "sample", {"num_neighbors": 1 << 31, "replace": True}, [seed])
    assert proc.poll() is None
    assert isinstance(reply, ErrorReply)
    # Today: RuntimeError "DefaultCPUAllocator: can't allocate memory: you
    # tried to allocate 17179869184 bytes" (only because of the rlimit).
    assert reply.type in {"ProtocolError", "StoreError"}, reply


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="RpcServer's ROUTER has sndhwm=0: replies to a client that does "
                          "not read are buffered in the server without bound")
def test_replies_a_client_does_not_read_do_not_pile_up_in_the_server(server, part0):
    proc, endpoint = server
    ids = part0.node_ids[torch.arange(1000) % part0.node_ids.numel()]
    reply_bytes = ids.numel() * part0.node_features["x"][0].numel() * 4
    requests = 60  # 8 KB each, 5.7 MB answers: 344 MB if all were kept
    before = psutil.Process(proc.pid).memory_info().rss
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.rcvhwm = 1  # this client stops reading: TCP pushes back on the server
    sock.setsockopt(zmq.RCVBUF, 4096)
    try:
        sock.connect(endpoint)
        for i in range(requests):
            sock.send_multipart(encode_request(i, "get", {"attrs": ["x"]}, [ids]))
        with RawDealer(endpoint, timeout=60) as other:  # all served (FIFO workers)
            for i in range(requests):
                assert not isinstance(other.call(1000 + i, "ping"), ErrorReply)
        time.sleep(1.0)  # let the I/O thread hand the last replies to libzmq
        grown = psutil.Process(proc.pid).memory_info().rss - before
    finally:
        sock.close()
        ctx.term()
    print(f"\nserver RSS grew {grown / 2**20:.0f} MiB holding replies for a client that "
          f"does not read ({requests} x {reply_bytes / 2**20:.1f} MiB)")
    assert proc.poll() is None
    assert grown < requests * reply_bytes / 2
