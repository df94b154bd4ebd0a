"""Bounded retries with backoff for reads (:mod:`pyg_dist.rpc.retrying`).

A request is *lost* when the server received it and died before answering:
the server is stopped (SIGSTOP, so the request sits in its socket buffer),
then killed, then restarted on the same address. Requests sent while it is
down are queued by ZeroMQ and delivered when it is back, so only a lost one
needs a retry. The kill ends the connection, so the lost request fails at
once (``ServerUnavailableError``), not at its deadline, and a retry-safe one
is sent again until the restarted server answers it.
"""

from __future__ import annotations

import contextlib
import gc
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from support.servers import serve_part, serve_parts
from support.tcp_queues import unread_bytes
from support.waiting import wait_until
from torch_geometric.data import TensorAttr

from pyg_dist.errors import ServerUnavailableError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.protocol.ops import OPS
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.rpc.retrying import RetryingClient
from pyg_dist.rpc.wire_format import encode_request
from pyg_dist.store.connect import connect

# Each attempt's deadline, and enough attempts to cover a server restart
# (seconds on a busy machine, up to half a minute at a load of 10 on two
# cores; the lost attempt ends at the kill, not at its deadline).
# Bytes of the smallest request these tests send (``meta``), header alone.
_SMALLEST_REQUEST = len(bytes(encode_request(1, "meta", {}, [])[0]))

RETRY_CONFIG = RpcConfig(timeout=3.0, retries=12, retry_backoff=0.1, retry_backoff_max=1.0,
                         connect_timeout=30.0)


def _lose_request_then_restart(stack, root, part, proc, endpoint, issue):
    """Runs ``issue()`` so that its first request is lost; returns its result."""
    proc.send_signal(signal.SIGSTOP)
    port = int(endpoint.rsplit(":", 1)[1])
    before = unread_bytes(port)  # heartbeats may have arrived meanwhile
    pool = stack.enter_context(ThreadPoolExecutor(1))
    future = pool.submit(issue)
    # The request is lost only once it reached the stopped server (a
    # request still in the client would go to the restarted one): wait for
    # its bytes in the server's receive queue. Even the smallest (a meta
    # request with its framing) is bigger than a heartbeat.
    wait_until(lambda: unread_bytes(port) - before >= _SMALLEST_REQUEST, 30,
               "the request to reach the stopped server's socket")
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    _, again = stack.enter_context(serve_part(root, part, serve_args=["--bind", endpoint]))
    assert again == endpoint
    return future.result(timeout=120)


@pytest.mark.parametrize("retrying", [True, False], ids=["retried", "control"])
def test_a_read_is_retried_until_a_restarted_server_answers(cora2_root, retrying):
    with contextlib.ExitStack() as stack:
        proc, endpoint = stack.enter_context(serve_part(cora2_root, 1))
        # The control makes one attempt (the RPC client below the retry layer).
        client = stack.enter_context(RetryingClient([endpoint], RETRY_CONFIG, OPS) if retrying
                                     else RpcClient([endpoint], RETRY_CONFIG))
        assert client.call(0, "meta").result["part"] == 1

        def issue():
            return client.call(0, "meta")

        if retrying:
            reply = _lose_request_then_restart(stack, cora2_root, 1, proc, endpoint, issue)
            assert reply.result["part"] == 1
        else:  # the control: the request really was lost
            with pytest.raises(ServerUnavailableError) as info:
                _lose_request_then_restart(stack, cora2_root, 1, proc, endpoint, issue)
            assert info.value.address == endpoint


# 5 rows of Cora's 1,433 features travel over the socket; 400 rows (2.3 MB)
# into shared memory, which is never re-sent into: the retries after the
# lost attempt go over the socket.
@pytest.mark.parametrize("rows", [5, 400], ids=["socket", "shared-memory"])
def test_feature_reads_through_the_store_are_retried(cora2_root, cora_data, rows):
    ids = PartitionReader(cora2_root).load_part(1).node_ids[:rows]
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(serve_parts(cora2_root))
        fs, _ = connect(cluster.endpoints, RETRY_CONFIG)
        stack.callback(fs.close)
        fs.router.client.ping(1)  # it learns the server shares its host: it lends
        x = _lose_request_then_restart(
            stack, cora2_root, 1, cluster.processes[1], cluster.endpoints[1],
            lambda: fs.get_tensor(TensorAttr(None, "x", ids)))
        assert torch.equal(x, cora_data.x[ids])
        # With 400 rows the lost attempt wrote into memory lent for it: given
        # up, never reused, and its key goes to the server with its next
        # request (a reply segment, or the batch's own outputs, which the
        # server was to write its rows into in place, once they are dropped).
        del x
        gc.collect()
        outputs = fs.router._outputs or None
        given_up = fs.router.client.transport._lender.pool(1).take_dropped() + \
            (outputs._dropped.get(1, []) if outputs is not None else [])
        assert len(given_up) == (1 if rows == 400 else 0)
        if outputs is not None:  # nothing left to be reused
            assert not outputs._all and not outputs._free
