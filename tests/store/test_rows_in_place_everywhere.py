"""Rows written in place on every path: a heterogeneous batch's node types
too, and a counter of the rows the trainer copies (0 when every owner is on
this host). Batches bit for bit those of the copy path (shared memory off).
Real server processes on 127.0.0.1, real segments in /dev/shm."""

from __future__ import annotations

import pytest
import torch
from support.servers import serve_parts
from support.shm_files import needs_shm

from pyg_dist.datasets import fake, fake_hetero
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.store.connect import connect

pytestmark = needs_shm

FANOUT = [8, 4]


def _served(tmp_path_factory, data, name):
    root = str(tmp_path_factory.mktemp(name) / "parts")
    partition(data, 2, root, "random")
    return serve_parts(root)


@pytest.fixture(scope="module")
def homo(tmp_path_factory):
    data = fake(num_nodes=3000, avg_degree=6, num_channels=64, seed=2)
    with _served(tmp_path_factory, data, "homo") as cluster:
        yield data, cluster.endpoints


@pytest.fixture(scope="module")
def hetero(tmp_path_factory):
    data = fake_hetero(num_nodes=3000, avg_degree=4.0, num_channels=64, seed=2)
    with _served(tmp_path_factory, data, "hetero") as cluster:
        yield data, cluster.endpoints


def _epoch(endpoints, input_nodes, shared_memory: bool):
    """The epoch's batches and the rows the trainer copied for them."""
    config = None if shared_memory else RpcConfig(shared_memory_bytes=0)
    fs, gs = connect(endpoints, config)
    try:
        loader = DistNeighborLoader((fs, gs), num_neighbors=FANOUT, input_nodes=input_nodes,
                                    batch_size=256, seed=4)
        batches = list(loader)
        return batches, fs.router.copied_rows, fs.router._outputs
    finally:
        fs.close()


def _assert_same(a, b) -> None:
    assert len(a) == len(b) > 0
    for one, two in zip(a, b):
        for store_a, store_b in zip(one.stores, two.stores):
            assert sorted(store_a.keys()) == sorted(store_b.keys())
            for name, value in store_a.items():
                if isinstance(value, torch.Tensor):
                    assert value.dtype == store_b[name].dtype, name
                    assert torch.equal(value, store_b[name]), name
                else:
                    assert value == store_b[name], name


def test_homogeneous_rows_in_place_copy_nothing_and_equal_the_copy_path(homo):
    data, endpoints = homo
    seeds = torch.arange(0, data.num_nodes, 2)
    placed, placed_copies, pool = _epoch(endpoints, seeds, shared_memory=True)
    copied, copies, _ = _epoch(endpoints, seeds, shared_memory=False)
    _assert_same(copied, placed)
    assert placed_copies == 0 and pool.parts == {0, 1}
    assert copies == sum(batch.num_nodes for batch in copied)  # every row, x and y in one
    assert torch.equal(placed[0].x, data.x[placed[0].n_id])


def test_heterogeneous_rows_in_place_copy_nothing_and_equal_the_copy_path(hetero):
    data, endpoints = hetero
    seeds = ("v0", torch.arange(0, data["v0"].num_nodes, 2))
    placed, placed_copies, pool = _epoch(endpoints, seeds, shared_memory=True)
    copied, copies, _ = _epoch(endpoints, seeds, shared_memory=False)
    _assert_same(copied, placed)
    assert placed_copies == 0 and pool.parts == {0, 1}
    assert copies == sum(batch[t].num_nodes for batch in copied for t in batch.node_types)
    for t in placed[0].node_types:
        assert torch.equal(placed[0][t].x, data[t].x[placed[0][t].n_id]), t


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only fallback")
def test_without_cuda_a_page_locked_lease_falls_back_and_keeps_the_segment():
    from pyg_dist.rpc.shm.outputs import OutputPool

    pool = OutputPool(16 << 20, [0])
    try:
        assert pool.lease([(torch.float32, (1024, 64))], page_locked=True) is None
        assert pool.page_locked_segments == 0 and pool.free_segments == 1
        # Not asked again, and the segment serves a plain lease.
        assert pool.lease([(torch.float32, (1024, 64))], page_locked=True) is None
        lease = pool.lease([(torch.float32, (1024, 64))])
        assert lease is not None and pool.free_segments == 0
    finally:
        pool.close()
