"""RpcClient against real RpcServers on loopback."""

from __future__ import annotations

import time

import pytest
import torch
from support.handlers import HANDLERS, whoami_factory
from support.threads import run_in_threads

from pyg_dist.errors import RemoteError, RpcError, RpcTimeoutError, TransportError
from pyg_dist.rpc import PROTOCOL_VERSION, RpcClient, RpcConfig, RpcServer, client as rpc_client


def test_echo_round_trips_args_and_tensors_of_every_size(server):
    tensors = [torch.randn(300_000, 8), torch.arange(5), torch.empty(0, 3, dtype=torch.int32),
               torch.tensor([True, False])]
    with RpcClient([server.endpoint]) as client:
        reply = client.call(0, "echo", {"a": [1, 2], "b": {"c": "d"}}, tensors)
    assert reply.result == {"args": {"a": [1, 2], "b": {"c": "d"}}}
    assert len(reply.tensors) == len(tensors)
    for got, want in zip(reply.tensors, tensors):
        assert torch.equal(got, want)


def test_ping_reports_protocol_version_and_ops(server):
    with RpcClient([server.endpoint]) as client:
        info = client.ping(0)
    assert info["version"] == PROTOCOL_VERSION
    assert info["name"] == "test-server"
    assert info["ops"] == sorted([*HANDLERS, "ping", "release"])


@pytest.mark.parametrize("op, args, message", [
    ("ping", {"usage": 1}, "'ping' argument 'usage' must be a bool, got 1"),
    ("release", {"segments": "all"}, "argument 'segments' must be a list of at most 1024"),
    ("release", {"segments": [["pyg-dist-shm-" + "0" * 32, "zz" * 16]]},
     "argument 'segments'[0] must be [name, token]"),
    ("release", {"segments": [["/etc/passwd", "00" * 16]]},
     "argument 'segments'[0] must be [name, token]"),
])
def test_ill_typed_arguments_of_the_servers_own_ops_are_refused(server, op, args, message):
    with RpcClient([server.endpoint]) as client:
        with pytest.raises(RemoteError) as info:
            client.call(0, op, args)
        assert info.value.remote_type == "ProtocolError"
        assert message in info.value.remote_message
        # Well-typed, the same ops are answered: the server goes on serving.
        assert client.call(0, "release", {"segments": []}).result == {"released": 0}
        assert "usage" in client.call(0, "ping", {"usage": True}).result


def test_eight_threads_with_64_calls_in_flight_each_get_their_own_answers(server):
    with RpcClient([server.endpoint]) as client:
        def worker(t):
            sent = [(t * 1000 + i, torch.full((100 + i,), float(t))) for i in range(64)]
            futures = [client.call_async(0, "add", {"k": k}, [x]) for k, x in sent]
            for (k, x), fut in zip(sent, futures):
                reply = fut.result(timeout=30)
                assert reply.result == {"k": k}
                assert torch.equal(reply.tensors[0], x + k)

        run_in_threads(worker, 8, timeout=60)


def test_no_reply_waits_unnoticed_when_callers_send_themselves(server, monkeypatch):
    # Callers send on the sockets themselves, which can take in the notice
    # of a reply that arrived; with the I/O thread's own wake-up a minute
    # away, a reply left unread would make its call miss the 10 s wait.
    monkeypatch.setattr(rpc_client, "MAX_POLL_MS", 60_000)
    with RpcClient([server.endpoint], RpcConfig(timeout=30)) as client:
        def worker(t):
            for i in range(200):
                futures = [client.call_async(0, "add", {"k": i}, [torch.tensor([t, j])])
                           for j in range(1 + i % 3)]
                for j, fut in enumerate(futures):
                    assert fut.result(timeout=10).tensors[0].tolist() == [t + i, j + i]

        run_in_threads(worker, 4)


def test_a_short_deadline_is_kept_while_the_io_thread_sleeps_long(server, monkeypatch):
    monkeypatch.setattr(rpc_client, "MAX_POLL_MS", 60_000)
    with RpcClient([server.endpoint]) as client:
        for _ in range(3):
            client.call(0, "echo")
        time.sleep(0.2)  # nothing pending: the I/O thread sleeps a minute now
        start = time.monotonic()
        future = client.call_async(0, "slow", {"s": 3.0}, timeout=0.3)
        with pytest.raises(RpcTimeoutError):
            future.result(timeout=30)
        assert time.monotonic() - start < 2.5


def test_remote_error_keeps_the_server_message_intact(server):
    message = "ids [3, 7] are out of range [0, 5): check your seeds"
    with RpcClient([server.endpoint]) as client:
        with pytest.raises(RemoteError) as info:
            client.call(0, "boom", {"msg": message})
        # The server keeps serving after a failing handler.
        assert client.call(0, "echo", {"x": 1}).result == {"args": {"x": 1}}
    err = info.value
    assert err.remote_message == message
    assert err.remote_type == "ValueError"
    assert (err.address, err.op) == (server.endpoint, "boom")
    assert message in str(err)


def test_unexpected_handler_failure_and_unknown_op_become_error_replies(server):
    with RpcClient([server.endpoint]) as client:
        with pytest.raises(RemoteError, match="handler bug") as crashed:
            client.call(0, "crash")
        with pytest.raises(RemoteError, match="unknown op 'nope'") as unknown:
            client.call(0, "nope")
    assert crashed.value.remote_type == "RuntimeError"
    assert unknown.value.remote_type == "ProtocolError"


def test_slow_reply_raises_typed_timeout_naming_address_and_op(server):
    with RpcClient([server.endpoint]) as client:
        future = client.call_async(0, "slow", {"s": 1.0}, timeout=0.2)
        with pytest.raises(RpcTimeoutError) as info:
            future.result(timeout=10)
        assert client.call(0, "echo", {"after": True}).result == {"args": {"after": True}}
    assert isinstance(info.value, TimeoutError)
    assert (info.value.address, info.value.op) == (server.endpoint, "slow")
    assert server.endpoint in str(info.value) and "'slow'" in str(info.value)


def test_call_to_a_stopped_server_times_out_within_its_deadline():
    srv = RpcServer(HANDLERS)
    endpoint = srv.start()
    srv.stop()
    with RpcClient([endpoint], RpcConfig(timeout=0.3)) as client:
        future = client.call_async(0, "echo")
        with pytest.raises(RpcTimeoutError) as info:
            # Generous bound: the future must complete by itself, not hang.
            future.result(timeout=10)
    assert info.value.address == endpoint and info.value.op == "echo"


def test_close_fails_calls_in_flight_and_refuses_new_ones(server):
    client = RpcClient([server.endpoint])
    future = client.call_async(0, "slow", {"s": 1.0})
    client.close()
    with pytest.raises(TransportError, match="client is closed"):
        future.result(timeout=10)
    with pytest.raises(RpcError, match="closed"):
        client.call_async(0, "echo")
    client.close()  # idempotent


def test_in_flight_bound_makes_callers_wait_and_time_out_clearly(server):
    with RpcClient([server.endpoint], RpcConfig(max_in_flight=2)) as client:
        slow = [client.call_async(0, "slow", {"s": 1.0}) for _ in range(2)]
        with pytest.raises(RpcTimeoutError, match="max_in_flight|in flight"):
            client.call_async(0, "echo", timeout=0.1)
        for fut in slow:
            assert fut.result(timeout=10).result == {"slept": 1.0}
        # Slots are released once replies arrive.
        assert client.call(0, "echo", {"i": 1}).result == {"args": {"i": 1}}


def test_one_client_routes_calls_to_the_right_server():
    servers = [RpcServer({"whoami": whoami_factory(name)}, name=name) for name in ("a", "bb")]
    try:
        endpoints = [s.start() for s in servers]
        with RpcClient(endpoints) as client:
            futures = [client.call_async(i % 2, "whoami") for i in range(20)]
            names = [f.result(timeout=10).result["name"] for f in futures]
        assert names == ["a", "bb"] * 10
    finally:
        for s in servers:
            s.stop()


def test_binding_a_taken_endpoint_raises_transport_error(server):
    with pytest.raises(TransportError, match="cannot serve"):
        RpcServer(HANDLERS, server.endpoint).start()


def test_bad_server_index_is_refused(server):
    with RpcClient([server.endpoint]) as client:
        with pytest.raises(RpcError, match="out of range"):
            client.call_async(1, "echo")


def test_inline_server_without_workers_serves_correctly():
    with RpcServer(HANDLERS, config=RpcConfig(workers=0)) as srv:
        with RpcClient([srv.endpoint]) as client:
            x = torch.arange(1000, dtype=torch.float64)
            futures = [client.call_async(0, "add", {"k": k}, [x]) for k in range(50)]
            for k, fut in enumerate(futures):
                assert torch.equal(fut.result(timeout=30).tensors[0], x + k)
            with pytest.raises(RemoteError, match="boom"):
                client.call(0, "boom", {"msg": "boom"})


def test_a_client_left_open_is_closed_at_exit_in_its_own_process_only(server):
    # What the exit hook does: a trainer that never closes its stores must
    # not leave the I/O thread running while the interpreter tears torch down.
    from pyg_dist.rpc.client import _close_open_clients

    mine, forked_copy = RpcClient([server.endpoint]), RpcClient([server.endpoint])
    try:
        mine.ping(0)
        forked_copy._pid = -1  # as a fork's copy sees it: not this process's
        _close_open_clients([mine, forked_copy])  # not the session's other clients
        assert not mine._thread.is_alive()
        with pytest.raises(RpcError):
            mine.call(0, "echo", {})
        assert forked_copy._thread.is_alive() and forked_copy.ping(0)["version"]
    finally:
        forked_copy._pid = mine._pid
        forked_copy.close()
        mine.close()
