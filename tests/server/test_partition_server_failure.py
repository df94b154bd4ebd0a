"""A server that has to stop says so: ``serve_forever`` raises a typed
error and ``pyg-dist serve`` exits non-zero, instead of returning (exit
status 0, read by a launcher as a finished job) or serving on with a dead
thread. The failure is a store plugin whose reads raise ``SystemExit``
(:mod:`support.exiting_store`), served inline and by a worker."""

from __future__ import annotations

import os
import threading
from importlib.metadata import EntryPoint

import pytest
import zmq
from support import exiting_store
from support.rawzmq import RawDealer
from support.servers import serve_part

from pyg_dist.errors import TransportError
from pyg_dist.plugins import PluginRegistry
from pyg_dist.rpc import RpcConfig, wire_format
from pyg_dist.server import PartitionServer

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _registry() -> PluginRegistry:
    return PluginRegistry([
        EntryPoint(exiting_store.NAME, exiting_store.ENTRY_POINT, "pyg_dist.feature_stores"),
        EntryPoint("memory", "pyg_dist_plugins.stores.memory:memory_graph_store",
                   "pyg_dist.graph_stores"),
    ])


def _get(cora_reader, pad: bool) -> list:
    ids = cora_reader.load_part(0, topology=False).node_ids[:3]
    # Over 16 KiB of ids: served by a worker instead of the I/O thread.
    ids = ids.repeat(3000) if pad else ids
    return wire_format.encode_request(1, "get", {"groups": [{"attrs": ["x"]}]}, [ids])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", ["inline", "worker"])
def test_serve_forever_raises_when_the_server_stops_on_a_failure(cora2_root, cora_reader, path):
    server = PartitionServer(cora2_root, 0, feature_store=exiting_store.NAME,
                             registry=_registry(), config=RpcConfig(workers=2))
    ready = threading.Event()
    outcome: list[BaseException | None] = []

    def serve() -> None:
        try:
            server.serve_forever(on_ready=lambda endpoint: ready.set())
            outcome.append(None)
        except BaseException as exc:  # checked below, in the test's thread
            outcome.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert ready.wait(60)
        # The socket stays open meanwhile: closed at once (LINGER=0), it
        # may drop the request before it went out.
        with RawDealer(server.endpoint, timeout=2) as dealer:
            dealer.send(_get(cora_reader, path == "worker"))
            thread.join(30)
        assert not thread.is_alive(), "serve_forever went on serving with a dead thread"
    finally:
        server.stop()
        thread.join(10)
    assert isinstance(outcome[0], TransportError), outcome
    assert "stopped serving: SystemExit" in str(outcome[0])


@pytest.mark.timeout(240)
def test_pyg_dist_serve_exits_non_zero_when_the_server_stops_on_a_failure(cora2_root,
                                                                          cora_reader,
                                                                          tmp_path):
    exiting_store.install_dist_info(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), TESTS, os.environ.get("PYTHONPATH", "")]))
    args = ["--feature-store", exiting_store.NAME, "--workers", "2"]
    with serve_part(cora2_root, 0, serve_args=args, env=env) as (proc, endpoint):
        with RawDealer(endpoint, timeout=2) as dealer:
            dealer.send(_get(cora_reader, False))
            with pytest.raises(zmq.Again):  # no reply: the server stopped
                dealer.recv()
        assert proc.wait(60) == 1
