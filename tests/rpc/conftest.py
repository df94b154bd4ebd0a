"""A real RpcServer on loopback with a tiny handler table."""

from __future__ import annotations

import pytest
from support.handlers import HANDLERS

from pyg_dist.rpc import RpcConfig, RpcServer


@pytest.fixture
def server():
    config = RpcConfig(workers=4, max_message_bytes=64 << 20, timeout=10.0)
    srv = RpcServer(HANDLERS, "tcp://127.0.0.1:0", config, name="test-server")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()

