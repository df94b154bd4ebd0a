"""Dead, frozen and unreachable servers are detected, slow ones waited for.

Real RpcServers on loopback; a :class:`~support.blackhole_proxy.BlackholeProxy`
between client and server stands in for a crashed server's kernel closing
the connection (``reset``) and for a pulled cable (``cut``: both
connections stay open, nothing gets through). Every deadline here is long
(30 s): a typed error well before it can only come from detection. The
process-level variants (SIGKILL, SIGSTOP of ``pyg-dist serve``, through the
loader) are in ``tests/reliability/test_dead_servers.py``.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import zmq
from support.blackhole_proxy import BlackholeProxy
from support.handlers import HANDLERS

from pyg_dist.errors import ProtocolError, RpcError, RpcTimeoutError, ServerUnavailableError
from pyg_dist.rpc import RpcClient, RpcConfig, RpcServer, wire_format
from pyg_dist.rpc.liveness import set_heartbeats

DEADLINE = 30.0
# Short heartbeats keep these tests quick; the defaults are checked in
# tests/reliability.
FAST = RpcConfig(timeout=DEADLINE, heartbeat_interval=0.2, heartbeat_timeout=1.0,
                 reconnect_grace=1.0, workers=2)


def _client_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "pyg-dist-rpc-client"]


@pytest.fixture
def served():
    """A real server and a proxy in front of it: ``(server, proxy)``."""
    with RpcServer(HANDLERS, config=FAST, name="liveness") as srv:
        with BlackholeProxy(srv.endpoint) as proxy:
            yield srv, proxy


def _fails_fast(future, error: type[Exception]) -> tuple[Exception, float]:
    start = time.monotonic()
    with pytest.raises(error) as info:
        future.result(timeout=DEADLINE + 10)
    return info.value, time.monotonic() - start


def test_calls_awaiting_a_closed_connection_fail_at_once_naming_the_server(served):
    _, proxy = served
    with RpcClient([proxy.endpoint], FAST) as client:
        assert client.call(0, "echo", {"i": 1}).result == {"args": {"i": 1}}
        calls = [client.call_async(0, "slow", {"s": 2.0}) for _ in range(3)]
        time.sleep(0.2)  # the requests are at the server
        proxy.reset()
        for future in calls:
            err, elapsed = _fails_fast(future, ServerUnavailableError)
            assert elapsed < 3.0, f"detected after {elapsed:.2f}s"
            assert err.address == proxy.endpoint and proxy.endpoint in str(err)
            assert err.op == "slow"


def test_a_cut_link_fails_calls_within_the_heartbeat_timeout(served):
    _, proxy = served
    with RpcClient([proxy.endpoint], FAST) as client:
        assert client.call(0, "echo").result == {"args": {}}
        future = client.call_async(0, "slow", {"s": 0.5})
        proxy.cut()  # before the reply: it is lost on the link
        err, elapsed = _fails_fast(future, ServerUnavailableError)
    bound = FAST.heartbeat_timeout + 1.0  # 1 s for a busy machine
    assert elapsed < bound, f"detected after {elapsed:.2f}s, bound {bound}s"
    assert err.address == proxy.endpoint


@pytest.mark.parametrize("workers", [0, 2], ids=["inline", "workers"])
def test_a_slow_but_alive_server_keeps_the_whole_deadline(workers):
    # The handler sleeps five heartbeat timeouts; inline it also holds the
    # server's Python I/O thread. libzmq answers the PINGs by itself.
    config = FAST.replace(workers=workers, heartbeat_interval=0.1, heartbeat_timeout=0.3)
    with RpcServer(HANDLERS, config=config) as srv, RpcClient([srv.endpoint], config) as client:
        start = time.monotonic()
        reply = client.call(0, "slow", {"s": 1.5})
        assert reply.result == {"slept": 1.5}
        assert time.monotonic() - start >= 1.5
        assert client.call(0, "echo", {"after": 1}).result == {"args": {"after": 1}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_call_made_while_the_server_is_down_waits_for_its_restart():
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    # libzmq reconnects after 0.1, 0.3, 0.7, 1.5 s (+ jitter): a grace of
    # 3 s has room on a busy machine.
    with RpcClient([endpoint], FAST.replace(reconnect_grace=3.0)) as client:
        with RpcServer(HANDLERS, endpoint, FAST):
            assert client.call(0, "echo", {"n": 1}).result == {"args": {"n": 1}}
        time.sleep(0.3)  # the client has seen the connection end
        future = client.call_async(0, "echo", {"n": 2})
        time.sleep(0.2)
        with RpcServer(HANDLERS, endpoint, FAST):  # back within the grace
            assert future.result(timeout=DEADLINE).result == {"args": {"n": 2}}
            # And later calls use it as before.
            assert client.call(0, "echo", {"n": 3}).result == {"args": {"n": 3}}


def test_a_call_to_a_server_that_stays_down_fails_after_the_grace():
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    with RpcClient([endpoint], FAST) as client:
        with RpcServer(HANDLERS, endpoint, FAST):
            client.call(0, "echo")
        time.sleep(0.3)
        err, elapsed = _fails_fast(client.call_async(0, "echo"), ServerUnavailableError)
    assert FAST.reconnect_grace - 0.1 <= elapsed < FAST.reconnect_grace + 2.0
    assert err.address == endpoint and "reconnect_grace" in str(err)


def test_with_retries_configured_a_lost_server_is_waited_for_past_the_grace():
    # A deployment that asked for retries rides out restarts: the deadline
    # decides, not the reconnect grace.
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    config = FAST.replace(retries=1, reconnect_grace=0.3)
    with RpcClient([endpoint], config) as client:
        with RpcServer(HANDLERS, endpoint, FAST):
            client.call(0, "echo")
        time.sleep(0.3)
        future = client.call_async(0, "echo", {"n": 2})
        time.sleep(1.0)  # three graces
        assert not future.done()
        with RpcServer(HANDLERS, endpoint, FAST):
            assert future.result(timeout=DEADLINE).result == {"args": {"n": 2}}


def test_a_server_never_reached_keeps_the_deadline_and_times_out():
    # Nothing was ever connected, so nothing was lost: the deadline decides.
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    with RpcClient([endpoint], FAST) as client:
        future = client.call_async(0, "echo", timeout=1.0)
        err, elapsed = _fails_fast(future, RpcTimeoutError)
    assert elapsed >= 0.9 and err.address == endpoint


def test_no_thread_is_left_behind_after_detection(served):
    _, proxy = served
    before = len(_client_threads())
    client = RpcClient([proxy.endpoint], FAST)
    try:
        client.call(0, "echo")
        future = client.call_async(0, "slow", {"s": 2.0})
        proxy.cut()
        with pytest.raises(ServerUnavailableError):
            future.result(timeout=DEADLINE)
    finally:
        client.close()
    assert len(_client_threads()) == before


@pytest.mark.parametrize("address", ["127.0.0.1", "tcp://127.0.0.1", "tcp://127.0.0.1:0",
                                     "tcp://127.0.0.1:70000", "udp://127.0.0.1:5555",
                                     "tcp://:5555", "127.0.0.1:port", "", "inproc://x",
                                     "tcp://a b:1"])
def test_unparsable_addresses_are_refused_before_any_thread_starts(address):
    before = threading.active_count()
    with pytest.raises(RpcError, match="server address") as info:
        RpcClient(["tcp://127.0.0.1:5555", address])
    assert threading.active_count() == before
    assert repr(address.strip()) in str(info.value)


def test_host_and_port_without_a_scheme_mean_tcp(served):
    srv, _ = served
    host_port = srv.endpoint.removeprefix("tcp://")
    with RpcClient([host_port], FAST) as client:
        assert client.endpoints == (srv.endpoint,)
        assert client.call(0, "echo", {"x": 1}).result == {"args": {"x": 1}}


def _nested_id_reply(depth: int) -> bytes:
    """A reply header ``{"version": PROTOCOL_VERSION, "id": [[[...nil...]]],
    "status": "ok"}`` in msgpack, the id nested ``depth`` deep."""
    return (b"\x83\xa7version" + bytes([wire_format.PROTOCOL_VERSION]) + b"\xa2id"
            + b"\x91" * depth + b"\xc0" + b"\xa6status\xa2ok")


def test_a_reply_that_breaks_the_decoder_does_not_stop_the_client():
    # A rogue server answers the first call with an id nested 1,015 deep
    # (building an error message from it overflowed the stack), the second
    # properly: the client's I/O thread must still be there to read it.
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    router.rcvtimeo = 10_000
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        with RpcClient([f"tcp://127.0.0.1:{port}"], FAST) as client:
            poisoned = client.call_async(0, "echo", timeout=1.0)
            peer, request = router.recv_multipart()[:2]
            router.send_multipart([peer, _nested_id_reply(1015)])
            with pytest.raises((RpcTimeoutError, ProtocolError)):
                poisoned.result(timeout=DEADLINE)
            healthy = client.call_async(0, "echo")
            peer, request = router.recv_multipart()[:2]
            req_id = wire_format.peek_id([request])
            router.send_multipart([peer, *wire_format.encode_reply(req_id, {"ok": 1}, [])])
            assert healthy.result(timeout=DEADLINE).result == {"ok": 1}
    finally:
        router.close()
        ctx.term()


def test_heartbeat_settings_come_from_the_environment_and_reach_the_socket():
    env = {"PYG_DIST_HEARTBEAT_INTERVAL": "0.5", "PYG_DIST_HEARTBEAT_TIMEOUT": "2.5",
           "PYG_DIST_RECONNECT_GRACE": "4"}
    config = RpcConfig.from_env(env)
    assert (config.heartbeat_interval, config.heartbeat_timeout, config.reconnect_grace) \
        == (0.5, 2.5, 4.0)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        set_heartbeats(sock, config)
        # libzmq waits timeout - interval after a PING: the silence may start
        # one interval before it.
        assert sock.getsockopt(zmq.HEARTBEAT_IVL) == 500
        assert sock.getsockopt(zmq.HEARTBEAT_TIMEOUT) == 2000
        assert sock.getsockopt(zmq.HEARTBEAT_TTL) == 2500
    finally:
        sock.close(linger=0)
        ctx.term()


@pytest.mark.parametrize("changes", [{"heartbeat_interval": -1}, {"heartbeat_timeout": 0},
                                     {"heartbeat_interval": 2.0, "heartbeat_timeout": 2.0},
                                     {"heartbeat_timeout": 7000}, {"reconnect_grace": -1}])
def test_out_of_range_heartbeat_settings_are_refused(changes):
    with pytest.raises(RpcError, match=next(iter(changes)).split("_")[0]):
        RpcConfig(**changes)
