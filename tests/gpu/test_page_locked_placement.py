"""Same-host servers write a GPU-bound batch's rows into page-locked shared
memory: no row copied on the trainer, no second pinning pass, batches bit
for bit the CPU ones; the GPU feature cache on the real path.

These need a CUDA GPU and are skipped without one. Real server processes on
loopback, real shared-memory segments (memfd) registered with CUDA.
"""

from __future__ import annotations

import gc

import pytest
import torch
from support.servers import serve_parts
from support.shm_files import needs_shm

from pyg_dist.datasets import fake
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.rpc.shm.outputs import OutputPool
from pyg_dist.rpc.shm.page_lock import page_lock, page_unlock
from pyg_dist.store.cached_feature_store import CachedFeatureStore
from pyg_dist.store.connect import connect
from pyg_dist.store.remote_feature_store import pinned_outputs

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              needs_shm]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """4,000 nodes with 64 features in 2 parts (batches well above the
    shared-memory threshold)."""
    data = fake(num_nodes=4000, avg_degree=8, num_channels=64, num_classes=4, seed=1)
    root = tmp_path_factory.mktemp("gpu-placed") / "fake2"
    partition(data, 2, str(root), progress=False)
    with serve_parts(root) as cluster:
        yield data, cluster.endpoints


def _epoch(stores, prefetch, device=None):
    loader = DistNeighborLoader(stores, num_neighbors=[10, 5], input_nodes=torch.arange(2048),
                                batch_size=256, prefetch=prefetch, seed=3, device=device)
    return list(loader)


def _same(cpu_batches, gpu_batches):
    assert len(cpu_batches) == len(gpu_batches) > 0
    for cpu, gpu in zip(cpu_batches, gpu_batches):
        for key in ("x", "y", "edge_index", "n_id", "e_id"):
            assert gpu[key].is_cuda, key
            assert torch.equal(gpu[key].cpu(), cpu[key]), key


def test_page_lock_makes_a_tensor_pinned_and_unlock_undoes_it():
    memory = torch.empty(1 << 20, dtype=torch.uint8)
    assert not memory.is_pinned()
    assert page_lock(memory)
    assert memory.is_pinned()
    page_unlock(memory.data_ptr())
    assert not memory.is_pinned()


def test_a_page_locked_lease_is_registered_once_and_kept_for_reuse():
    pool = OutputPool(64 << 20, [0])
    try:
        lease = pool.lease([(torch.float32, (4096, 64))], page_locked=True)
        assert lease is not None and lease.tensors[0].is_pinned()
        assert pool.page_locked_segments == 1
        del lease
        gc.collect()
        again = pool.lease([(torch.float32, (4096, 64))], page_locked=True)
        assert again.tensors[0].is_pinned() and pool.page_locked_segments == 1
    finally:
        pool.close()


@pytest.mark.parametrize("prefetch", [1, 4])
def test_gpu_batches_are_written_in_place_and_equal_the_cpu_batches(served, prefetch):
    _, endpoints = served
    fs, gs = connect(endpoints)
    try:
        reference = _epoch((fs, gs), 0)
        before = fs.router.copied_rows
        batches = _epoch((fs, gs), prefetch, device="cuda")
        _same(reference, batches)
        assert fs.router.copied_rows == before  # no row copied by the trainer
        assert fs.router._outputs.page_locked_segments >= 1
    finally:
        fs.close()


@pytest.mark.parametrize("capacity", [0.3, 1.0])
@pytest.mark.parametrize("prefetch", [0, 4])
def test_the_gpu_cache_gathers_hits_on_the_device_and_equals_uncached(served, capacity,
                                                                      prefetch):
    _, endpoints = served
    fs, gs = connect(endpoints)
    try:
        reference = _epoch((fs, gs), 0)
        cached = CachedFeatureStore(fs, capacity, "degree", graph_store=gs, device="cuda")
        assert cached._types[None].rows["x"].is_cuda
        _same(reference, _epoch((cached, gs), prefetch, device="cuda"))
        stats = cached.cache_stats()
        assert stats["hits"] > 0 and (stats["misses"] == 0) == (capacity == 1.0)
    finally:
        fs.close()


def test_a_gpu_bound_batch_is_assembled_page_locked_edge_index_included(served):
    # Inside pinned_outputs (what the prefetch workers of a CUDA loader run
    # under) the rows lie in page-locked segments and the edge index is
    # stacked into pinned memory: the pinning pass before the copy to the
    # device copies neither. The same work item outside gives the same batch.
    _, endpoints = served
    fs, gs = connect(endpoints)
    try:
        loader = DistNeighborLoader((fs, gs), num_neighbors=[10, 5],
                                    input_nodes=torch.arange(2048), batch_size=256,
                                    prefetch=1, seed=3, device="cuda")
        item = next(loader._work_items())
        with pinned_outputs():
            pinned = loader._produce(item)
        pageable = loader._produce(item)
        assert pinned.x.is_pinned() and pinned.edge_index.is_pinned()
        assert not pageable.edge_index.is_pinned()
        for key in ("x", "y", "edge_index", "n_id", "e_id"):
            assert torch.equal(pinned[key], pageable[key]), key
    finally:
        fs.close()


@pytest.fixture(scope="module")
def served_forwarding(tmp_path_factory):
    """The same graph served by servers that sample among themselves."""
    data = fake(num_nodes=4000, avg_degree=8, num_channels=64, num_classes=4, seed=1)
    root = tmp_path_factory.mktemp("gpu-tree-rows") / "fake2"
    partition(data, 2, str(root), progress=False)
    with serve_parts(root, forwarding=True) as cluster:
        yield data, cluster.endpoints


def test_a_gpu_batch_sampled_on_the_servers_costs_one_call(served_forwarding):
    # Protocol 5's rows: the tree's coordinator has the owners write the
    # batch's rows into its page-locked outputs; the trainer makes one call a
    # batch, copies no row, and the batches are the hop-by-hop CPU ones.
    data, endpoints = served_forwarding
    fs, gs = connect(endpoints)
    kwargs = dict(num_neighbors=[10, 5], input_nodes=torch.arange(2048), batch_size=256,
                  seed=3)
    try:
        reference = list(DistNeighborLoader((fs, gs), server_hops=False, **kwargs))
        ops: list[str] = []
        call_all = fs.router.call_all

        def counted(requests, *args, **more):
            ops.extend(r.op for r in requests)
            return call_all(requests, *args, **more)

        fs.router.call_all = counted
        before = fs.router.copied_rows
        try:
            batches = list(DistNeighborLoader((fs, gs), server_hops=True, prefetch=4,
                                              device="cuda", **kwargs))
        finally:
            del fs.router.call_all
        _same(reference, batches)
        assert ops == ["sample_tree"] * len(batches)
        assert fs.router.copied_rows == before
        assert fs.router._outputs.page_locked_segments >= 1
    finally:
        fs.close()


@pytest.mark.parametrize("prefetch", [0, 4])
def test_colocated_gpu_batches_equal_the_cpu_batches(served, prefetch):
    # connect(colocate=True) on a GPU trainer: the parts answered in this
    # process, the batch pinned and moved on the side stream as any other.
    _, endpoints = served
    fs, gs = connect(endpoints)
    cfs, cgs = connect(endpoints, colocate=True)
    with fs, cfs:
        assert cgs.colocated_parts == (0, 1)
        _same(_epoch((fs, gs), 0), _epoch((cfs, cgs), prefetch, "cuda"))
