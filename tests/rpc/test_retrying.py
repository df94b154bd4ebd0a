"""The one retry and failover layer (:class:`RetryingClient`) against real
RpcServers on loopback: what is re-sent, where, and what never is.

The handlers count their calls, so every test checks how many attempts
really reached a server, not only the outcome.
"""

from __future__ import annotations

import collections
import threading

import pytest
from support.blackhole_proxy import BlackholeProxy
from support.handlers import HANDLERS

from pyg_dist.errors import (
    ProtocolError,
    RemoteError,
    RpcError,
    RpcTimeoutError,
    ServerBusyError,
    ServerUnavailableError,
    SharedMemoryError,
)
from pyg_dist.rpc import RpcConfig, RpcServer
from pyg_dist.rpc.op_spec import OpSpec
from pyg_dist.rpc.retrying import FirstAttempt, RetryingClient

# Declared like the partition ops: "read" may be sent again, "write" not.
OPS = {
    "read": OpSpec("read", optional=("n", "s", "busy"), reply=("n",)),
    "write": OpSpec("write", optional=("n", "s", "busy"), reply=("n",),
                    retry_safe=False),
    "lying": OpSpec("lying"),  # declares no tensors, answers one
}


class Counting:
    """Handlers that count their calls per ``n``; the first ``slow_first``
    attempts of each ``n`` sleep ``s`` seconds, the first ``busy`` ones are
    refused as busy."""

    def __init__(self, slow_first: int = 0) -> None:
        self.calls: collections.Counter = collections.Counter()
        self.slow_first = slow_first
        self._changed = threading.Condition()

    def __call__(self, args, tensors):
        with self._changed:
            self.calls[args.get("n")] += 1
            seen = self.calls[args.get("n")]
            self._changed.notify_all()
        if seen <= args.get("busy", 0):
            raise ServerBusyError("busy: reply budget spent")
        if seen <= self.slow_first:
            threading.Event().wait(args.get("s", 1.0))
        return {"n": args.get("n")}, []

    def wait_for(self, *ns: int, timeout: float = 10.0) -> None:
        """Waits until a call of every ``n`` in ``ns`` reached its handler."""
        with self._changed:
            assert self._changed.wait_for(lambda: all(self.calls[n] for n in ns), timeout), \
                f"calls {ns} never reached the server: {dict(self.calls)}"

    def table(self):
        import torch

        return {**HANDLERS, "read": self, "write": self,
                "lying": lambda args, tensors: ({}, [torch.zeros(1)])}


def _config(**changes):
    base = RpcConfig(timeout=0.5, workers=2, inline_bytes=0, retry_backoff=0.01,
                     retry_backoff_max=0.05, connect_timeout=10.0, reconnect_grace=1.0,
                     heartbeat_interval=0.2, heartbeat_timeout=1.0)
    return base.replace(**changes)


def test_a_retry_safe_op_is_sent_again_after_a_timeout_and_an_unsafe_one_is_not():
    handler = Counting(slow_first=1)
    config = _config(retries=2)
    with RpcServer(handler.table(), config=config) as srv, \
            RetryingClient([srv.endpoint], config, OPS) as client:
        assert client.call(0, "read", {"n": 1, "s": 1.5}).result == {"n": 1}
        assert handler.calls[1] == 2  # the slow first attempt and the re-send
        with pytest.raises(RpcTimeoutError):
            client.call(0, "write", {"n": 2, "s": 1.5})
        assert handler.calls[2] == 1


def test_without_retries_a_timed_out_read_fails_after_one_attempt():
    handler = Counting(slow_first=1)
    config = _config(retries=0)
    with RpcServer(handler.table(), config=config) as srv, \
            RetryingClient([srv.endpoint], config, OPS) as client:
        with pytest.raises(RpcTimeoutError) as info:
            client.call(0, "read", {"n": 1, "s": 1.5})
        assert info.value.address == srv.endpoint and info.value.op == "read"
        assert handler.calls[1] == 1


def test_a_read_is_sent_again_after_its_connection_is_lost_and_a_write_is_not():
    handler = Counting(slow_first=2)
    config = _config(timeout=30.0, retries=2)
    with RpcServer(handler.table(), config=config) as srv, \
            BlackholeProxy(srv.endpoint) as proxy, \
            RetryingClient([proxy.endpoint], config, OPS) as client:
        client.call(0, "read", {"n": 0})
        read = client.call_async(0, "read", {"n": 1, "s": 1.0})
        write = client.call_async(0, "write", {"n": 2, "s": 1.0})
        handler.wait_for(1, 2)  # both inside their handlers when the link drops
        proxy.reset()
        with pytest.raises(ServerUnavailableError):
            write.result(timeout=30)
        # Sent again over the new connection and answered there.
        assert read.result(timeout=30).result == {"n": 1}
        assert handler.calls[1] == 2 and handler.calls[2] == 1


def test_reads_fail_over_to_a_live_replica_which_later_calls_prefer():
    handler = Counting()
    config = _config(retries=0, timeout=2.0)
    dead = RpcServer(HANDLERS, config=config)
    dead_endpoint = dead.start()
    dead.stop()  # its port is closed: calls to it fail as unavailable or time out
    with RpcServer(handler.table(), config=config) as live, \
            RetryingClient([[dead_endpoint, live.endpoint]], config, OPS) as client:
        assert client.endpoints == (dead_endpoint,)
        assert client.call(0, "read", {"n": 1}).result == {"n": 1}
        assert client.endpoints == (live.endpoint,)  # demoted once, for every later call
        assert client.call(0, "read", {"n": 2}).result == {"n": 2}
        assert handler.calls == {1: 1, 2: 1}


def test_a_write_is_never_failed_over():
    handler = Counting()
    config = _config(retries=3, timeout=1.0)
    dead = RpcServer(HANDLERS, config=config)
    dead_endpoint = dead.start()
    dead.stop()
    with RpcServer(handler.table(), config=config) as live, \
            RetryingClient([[dead_endpoint, live.endpoint]], config, OPS) as client:
        with pytest.raises((RpcTimeoutError, ServerUnavailableError)):
            client.call(0, "write", {"n": 1})
        assert handler.calls[1] == 0


@pytest.mark.parametrize("op", ["read", "write"])
def test_a_busy_refusal_is_asked_again_whatever_the_op_and_counts_no_retry(op):
    handler = Counting()
    config = _config(retries=0, timeout=5.0)
    with RpcServer(handler.table(), config=config) as srv, \
            RetryingClient([srv.endpoint], config, OPS) as client:
        assert client.call(0, op, {"n": 1, "busy": 3}).result == {"n": 1}
        assert handler.calls[1] == 4


def test_a_server_busy_past_the_deadline_fails_with_its_refusal():
    handler = Counting()
    config = _config(retries=2, timeout=0.3)
    with RpcServer(handler.table(), config=config) as srv, \
            RetryingClient([srv.endpoint], config, OPS) as client:
        with pytest.raises(RemoteError) as info:
            client.call(0, "read", {"n": 1, "busy": 10 ** 6})
        assert info.value.remote_type == "ServerBusyError"
        assert handler.calls[1] >= 2


def test_a_remote_refusal_is_not_retried():
    config = _config(retries=3)
    calls = []

    def refuse(args, tensors):
        calls.append(1)
        raise ValueError("no such thing")

    ops = {"read": OpSpec("read")}
    with RpcServer({"read": refuse}, config=config) as srv, \
            RetryingClient([srv.endpoint], config, ops) as client:
        with pytest.raises(RemoteError, match="no such thing"):
            client.call(0, "read")
        assert len(calls) == 1


def test_a_reply_that_does_not_fit_its_declaration_fails_naming_op_and_server():
    handler = Counting()
    config = _config(retries=3)
    with RpcServer(handler.table(), config=config) as srv, \
            RetryingClient([srv.endpoint], config, OPS) as client:
        with pytest.raises(ProtocolError, match="answered 'lying' with 1 tensors") as info:
            client.call(0, "lying")
        assert info.value.address == srv.endpoint


def test_an_undeclared_op_is_sent_once_and_not_checked():
    config = _config(retries=3)
    with RpcServer(HANDLERS, config=config) as srv, \
            RetryingClient([srv.endpoint], config, OPS) as client:
        assert client.call(0, "echo", {"a": 1}).result == {"args": {"a": 1}}
        with pytest.raises(RpcTimeoutError):
            client.call(0, "slow", {"s": 2.0}, timeout=0.3)


def test_replica_lists_are_checked_before_connecting():
    with pytest.raises(RpcError, match="at least one endpoint"):
        RetryingClient([[]])
    with pytest.raises(RpcError, match="appears twice"):
        RetryingClient([["tcp://127.0.0.1:1", "tcp://127.0.0.1:1"]])


@pytest.mark.parametrize("first_fails", ["refused", "lost", "answered"])
def test_a_first_attempt_into_lent_memory_is_never_sent_again(first_fails):
    """A first attempt that writes into the caller's memory (a placed get)
    is sent once; the call goes on with its plain request: at once when
    the server refused to write there, as a retry when it was lost."""
    seen = []
    config = _config(retries=1, timeout=0.5)

    def read(args, tensors):
        seen.append("first" if args.get("place") else "plain")
        if args.get("place") and first_fails == "refused":
            raise SharedMemoryError("cannot map the segment")
        if args.get("place") and first_fails == "lost":
            threading.Event().wait(1.5)
        return {"n": 1, "placed": bool(args.get("place"))}, []

    given_up = []
    ops = {"read": OpSpec("read", optional=("place",), reply=("n",))}
    with RpcServer({"read": read}, config=config) as srv, \
            RetryingClient([srv.endpoint], config, ops) as client:
        first = FirstAttempt({"place": 7}, [], given_up.append)
        reply = client.result(client.call_async(0, "read", {}, first=first), 0, "read")
    if first_fails == "answered":
        assert reply.result["placed"] is True and seen == ["first"] and given_up == []
    else:
        assert reply.result["placed"] is False and seen == ["first", "plain"]
        assert given_up == [first_fails == "refused"]
