"""Replicas (``pyg_dist.connect`` with a list of servers for a part): killing
one (SIGKILL) in the middle of an epoch does not stop the epoch, in the main
process or in DataLoader worker processes: reads fail over to the other
replica and every batch is correct."""

from __future__ import annotations

import signal

import pytest
from reliability_checks import assert_batch_matches_graph
from support.servers import serve_parts

from pyg_dist.errors import ServerListError, StoreError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.rpc import RpcConfig
from pyg_dist.store.connect import connect


def test_epoch_survives_the_death_of_one_replica(cora2_root, cora_data, edge_keys):
    config = RpcConfig(timeout=2.0, connect_timeout=30.0)
    with serve_parts(cora2_root, [1, 0, 1]) as cluster:
        part1_a, part0, part1_b = cluster.endpoints
        with pytest.raises(StoreError, match="replica"):
            connect([[part0, part1_a], part1_b], config)
        fs, gs = connect([[part1_a, part1_b], part0], config)  # any group order
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


def test_failover_in_dataloader_worker_processes(cora2_root, cora_data, edge_keys,
                                                  monkeypatch):
    """Forked workers build their own failover client (not a plain one);
    the replicas come from PYG_DIST_SERVERS, joined by '|'."""
    config = RpcConfig(timeout=2.0, connect_timeout=30.0)
    with serve_parts(cora2_root, [0, 1, 1]) as cluster:
        part0, part1_a, part1_b = cluster.endpoints
        monkeypatch.setenv("PYG_DIST_SERVERS", f"{part0},{part1_a}|{part1_b}")
        fs, gs = connect(None, config)
        try:
            loader = DistNeighborLoader((fs, gs), num_neighbors=[5, 5], batch_size=256,
                                        seed=4, num_workers=2)
            seen = 0
            for step, batch in enumerate(loader):
                if step == 1:
                    cluster.processes[1].send_signal(signal.SIGKILL)  # part1_a
                assert_batch_matches_graph(batch, cora_data, edge_keys)
                seen += batch.batch_size
            assert seen == cora_data.num_nodes
        finally:
            fs.close()


def test_bad_replica_lists_are_refused_before_connecting():
    with pytest.raises(ServerListError, match="replica group .* is empty"):
        connect([["tcp://127.0.0.1:1"], []])
    with pytest.raises(ServerListError, match="empty member"):
        connect("127.0.0.1:1|,127.0.0.1:2")
    with pytest.raises(ServerListError, match="repeat"):
        connect([["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"], "tcp://127.0.0.1:1"])
