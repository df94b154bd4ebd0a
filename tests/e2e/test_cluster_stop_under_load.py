"""Servers stop on SIGTERM under load: no server of a ``LocalCluster`` needs
SIGKILL when it is stopped with batches in flight.

The bug this guards (issue 31, item 3): after a run with server hops, every
coordinator handed the memory it had lent its peers back on stop and waited
2 s per peer for each answer, while the peers, stopped at the same moment,
never answered. With 4 parts that is 6 s, past the launcher's 5 s grace,
and ``LocalCluster.stop()`` SIGKILLed every server. The test asserts what
``stop()`` observed (who exited by itself, with which status), not a time.
"""

from __future__ import annotations

import pytest
import torch
from support.servers import STARTUP_TIMEOUT

import pyg_dist
from pyg_dist.cluster import LocalCluster
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.rpc import RpcClient

PARTS = 4
IN_FLIGHT = 8
# Big enough that a peer's answer to a coordinator's second hop travels in
# shared memory the coordinator lends it (answers bounded over 64 KiB), which
# it hands back on stop.
BATCH = 128
FANOUT = [40, 40]


@pytest.fixture(scope="module")
def cora4_root(tmp_path_factory, cora_data):
    """Cora in 4 parts: each coordinator forwards to 3 peers."""
    root = tmp_path_factory.mktemp("shutdown-cora4") / "cora-4"
    pyg_dist.partition(cora_data, PARTS, root, partitioner="random")
    return root


def _trees_per_server(endpoints: list[str]) -> list[int]:
    with RpcClient(endpoints) as client:
        return [client.call(i, "stats").result["sample_tree_calls"]
                for i in range(len(endpoints))]


@pytest.mark.slow  # 4 server processes on a busy machine: ~20 s
def test_servers_stop_on_sigterm_with_batches_in_flight(cora4_root, cpu_hog):
    cluster = LocalCluster(cora4_root, forwarding=True, startup_timeout=STARTUP_TIMEOUT)
    cluster.start()
    stores = None
    try:
        stores = pyg_dist.connect(cluster.endpoints)
        loader = DistNeighborLoader(stores, num_neighbors=FANOUT, batch_size=BATCH,
                                    input_nodes=torch.arange(stores[0].num_nodes),
                                    shuffle=True, prefetch=IN_FLIGHT, server_hops=True)
        batches = iter(loader)
        for _ in range(2 * PARTS):
            assert next(batches).batch_size == BATCH
        # Every server coordinated trees, lending its peers memory.
        assert all(trees > 0 for trees in _trees_per_server(cluster.endpoints))
        # The loader is dropped with its batches in flight, never closed,
        # and the stores stay open: the servers stop under that load.
        del batches, loader
        cluster.stop()
    finally:
        cluster.stop()
        if stores is not None:
            stores[0].close()
    assert len(cluster.stopped) == PARTS
    killed = [p.pid for p in cluster.stopped if p.killed]
    assert killed == [], f"servers SIGKILLed after the SIGTERM grace: {cluster.stopped}"
    assert [p.returncode for p in cluster.stopped] == [0] * PARTS, cluster.stopped
