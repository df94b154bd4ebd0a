"""A coordinator whose peer list names an unreachable server: the trees that
arrive while it connects share one connection attempt instead of queueing
behind each other's (each a whole connect timeout: 10, 20, 30 s before)."""

from __future__ import annotations

import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from support.servers import serve_parts

from pyg_dist.errors import RemoteError
from pyg_dist.rpc import RpcClient, RpcConfig

CONNECT_TIMEOUT_S = 3.0
TREES = 3


@pytest.fixture
def dead_endpoint():
    """A loopback port nobody listens on (held bound, so nobody else takes it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"tcp://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.timeout(180)
def test_trees_share_one_connection_attempt_to_an_unreachable_peer(cora2_root,
                                                                   dead_endpoint):
    env = dict(os.environ, PYG_DIST_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT_S))
    with serve_parts(cora2_root, [0], serve_args=["--workers", str(TREES + 1)], env=env,
                     forwarding=True) as cluster:
        cluster.set_peers([cluster.endpoints[0], dead_endpoint])
        seeds = torch.arange(4)

        def tree(seed: int) -> tuple[float, str]:
            try:
                client.call(0, "sample_tree", {"edge_types": [None], "num_neighbors": [[2]],
                                               "seed_types": [None], "seed": seed}, [seeds])
            except RemoteError as exc:
                return time.monotonic(), str(exc)
            return time.monotonic(), "answered"

        with RpcClient(cluster.endpoints, RpcConfig(timeout=60)) as client, \
                ThreadPoolExecutor(TREES) as pool:
            start = time.monotonic()
            outcomes = list(pool.map(tree, range(1, TREES + 1)))
    for _, text in outcomes:
        assert "cannot reach its peers" in text, text
        # The client learns the part; the address stays in the server's log.
        assert "part 1" in text and dead_endpoint.rsplit(":", 1)[1] not in text, text
    # Serialised, the last would end after TREES connect timeouts.
    last = max(at for at, _ in outcomes) - start
    assert last < 2 * CONNECT_TIMEOUT_S, [round(at - start, 2) for at, _ in outcomes]
