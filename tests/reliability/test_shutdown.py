"""Stopping a server while a request is being served leaves no thread behind.

In process (the same ``RpcServer`` class ``pyg-dist serve`` runs), because
the property is about threads; ``pyg-dist serve`` ends with ``os._exit`` and
would hide a stuck thread after a 5 s wait.
"""

from __future__ import annotations

import threading
import time

import pytest
from support.handlers import HANDLERS

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
        time.sleep(0.3)  # the worker is inside the handler now
        server.stop(timeout=3.0)
        with pytest.raises(RpcError):  # its reply was dropped: a typed timeout
            future.result(timeout=30)
    finally:
        client.close()
    assert _server_threads("stop-test") == []
