"""Stopping a server while a request is being served leaves no thread behind.

In process (the same ``RpcServer`` class ``pyg-dist serve`` runs), because
the property is about threads; ``pyg-dist serve`` ends with ``os._exit`` and
would hide a stuck thread after a 5 s wait.
"""

from __future__ import annotations

import threading

import pytest
from support.handlers import HANDLERS, SLOW_RUNNING

from pyg_dist.errors import RpcError
from pyg_dist.rpc import RpcClient, RpcConfig, RpcServer


def _server_threads(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(name)]


def test_stop_during_a_running_handler_joins_every_thread():
    server = RpcServer(HANDLERS, config=RpcConfig(workers=1), name="stop-test")
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
    assert _server_threads("stop-test") == []
