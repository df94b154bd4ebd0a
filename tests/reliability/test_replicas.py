"""Replicas (prototype, ``pyg_dist.store.replicas``): with two servers for a
part, killing one (SIGKILL) in the middle of an epoch does not stop the
epoch: reads fail over to the other replica and every batch is correct."""

from __future__ import annotations

import signal

import pytest
from reliability_checks import assert_batch_matches_graph
from support.servers import serve_parts

from pyg_dist.errors import StoreError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.rpc import RpcConfig
from pyg_dist.store.replicas import connect_replicas


def test_epoch_survives_the_death_of_one_replica(cora2_root, cora_data, edge_keys):
    config = RpcConfig(timeout=2.0, connect_timeout=30.0)
    with serve_parts(cora2_root, [1, 0, 1]) as cluster:
        part1_a, part0, part1_b = cluster.endpoints
        with pytest.raises(StoreError, match="replica"):
            connect_replicas([[part0, part1_a], part1_b], config)
        fs, gs = connect_replicas([[part1_a, part1_b], part0], config)  # any group order
        try:
            loader = DistNeighborLoader((fs, gs), num_neighbors=[5, 5], batch_size=128,
                                        seed=3, prefetch=2)
            seen = 0
            for step, batch in enumerate(loader):
                if step == 2:
                    cluster.processes[0].send_signal(signal.SIGKILL)  # part1_a
                assert_batch_matches_graph(batch, cora_data, edge_keys)
                seen += batch.batch_size
            assert seen == cora_data.num_nodes
            assert cluster.processes[0].wait(timeout=10) == -signal.SIGKILL
            assert fs.router.client.endpoints == (part0, part1_b)  # ordered by part
            # The next epoch goes straight to the live replica.
            assert sum(b.batch_size for b in loader) == cora_data.num_nodes
        finally:
            fs.close()
