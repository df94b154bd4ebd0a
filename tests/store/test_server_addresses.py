"""Server addresses as trainers write them, and the deadline errors name.

``pyg_dist.connect`` takes ``host:port`` as ``tcp://host:port`` (as a list,
a comma-separated string, or ``PYG_DIST_SERVERS``) and refuses an
unparsable address with a typed error naming it before any thread starts;
a routed call's timeout names the deadline the caller set, not the
deadline plus the router's grace.
"""

from __future__ import annotations

import threading

import pytest
from support.handlers import HANDLERS

from pyg_dist.errors import RpcTimeoutError, StoreError
from pyg_dist.protocol.ops import STATS
from pyg_dist.routing.id_router import Router
from pyg_dist.rpc import RpcConfig, RpcServer
from pyg_dist.store.connect import SERVERS_ENV, connect


def test_host_and_port_without_a_scheme_connect_over_tcp(endpoints, monkeypatch):
    bare = [e.removeprefix("tcp://") for e in endpoints]
    with connect(bare)[0] as fs:
        assert fs.num_nodes == 2708
    monkeypatch.setenv(SERVERS_ENV, " , ".join(bare))
    with connect()[0] as fs:
        assert fs.num_nodes == 2708
    # The same server written both ways is one server, named twice.
    with pytest.raises(StoreError, match="repeat"):
        connect([endpoints[0], bare[0], endpoints[1], endpoints[2]])


@pytest.mark.parametrize("bad", ["localhost", "tcp://localhost", "localhost:99999",
                                 "http://localhost:80", "tcp://local host:5555"])
def test_unparsable_addresses_are_refused_before_any_thread_starts(endpoints, monkeypatch,
                                                                    bad):
    before = threading.active_count()
    with pytest.raises(StoreError, match="server address") as info:
        connect([endpoints[0], bad])
    assert repr(bad) in str(info.value)
    monkeypatch.setenv(SERVERS_ENV, f"{endpoints[0]},{bad}")
    with pytest.raises(StoreError, match=SERVERS_ENV):
        connect()
    assert threading.active_count() == before


def test_a_routed_timeout_names_the_callers_deadline():
    config = RpcConfig(workers=1, timeout=30.0)
    # A declared op (the router sends no other) answered slowly.
    with RpcServer({"stats": HANDLERS["slow"]}, config=config) as srv:
        router = Router([srv.endpoint], book=None, num_nodes=1, config=config)
        try:
            with pytest.raises(RpcTimeoutError) as info:
                router.call_all([STATS.request(0)], timeout=0.5)
        finally:
            router.close()
    message = str(info.value)
    # The client's own error: the 0.5 s deadline, not 0.5 s + the grace.
    assert "within 0.5s" in message and "5.5" not in message, message
    assert info.value.address == srv.endpoint and info.value.op == "stats"
