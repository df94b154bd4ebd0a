"""A refused connection is an answer: ``connect`` fails at once, naming the address.

ZeroMQ retries a refused TCP connection quietly, so before the probe a
mistyped port failed only at the ``meta`` deadline (10 s by default). The
deadlines here are an hour: a refusal that waited for them would show as a
hung test, not as the typed error these tests expect.
"""

from __future__ import annotations

import socket

import pytest

from pyg_dist.errors import ServerUnavailableError
from pyg_dist.rpc import RpcConfig
from pyg_dist.store.connect import connect

HOUR = RpcConfig(connect_timeout=3600.0, timeout=3600.0)


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_address_fails_at_once_naming_it(endpoints):
    dead = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ServerUnavailableError, match=f"tcp://{dead}: connection refused"):
        connect([endpoints[0], dead, endpoints[1], endpoints[2]], HOUR)
    # The live servers are untouched: they still serve a full connect.
    with connect(endpoints, HOUR)[0] as fs:
        assert fs.num_nodes == 2708


def test_a_host_name_that_does_not_resolve_fails_at_once():
    with pytest.raises(ServerUnavailableError, match="does not resolve"):
        connect(["no-such-host.invalid:5555"], HOUR)
