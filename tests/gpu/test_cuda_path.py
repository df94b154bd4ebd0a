"""The CUDA path of the loader: pinned memory, side-stream copies, nccl.

These tests need a CUDA GPU and are skipped without one (CI has none; they run
on a GPU machine with ``pytest tests/gpu``). Everything else is real: server
processes on loopback, the loader's prefetch threads, torchrun with nccl.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.servers import run_process_tree, serve_parts

from pyg_dist.datasets import fake
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.connect import connect

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served_fake(tmp_path_factory):
    """A 2,000-node synthetic graph in 2 parts, served on loopback."""
    data = fake(num_nodes=2000, avg_degree=8, num_channels=32, num_classes=4, seed=0)
    root = tmp_path_factory.mktemp("gpu") / "fake2"
    partition(data, 2, str(root), progress=False)
    with serve_parts(root) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            yield data, (fs, gs)
        finally:
            fs.close()


def _loader(stores, prefetch: int, device=None) -> DistNeighborLoader:
    return DistNeighborLoader(stores, num_neighbors=[10, 5], input_nodes=torch.arange(640),
                              batch_size=64, prefetch=prefetch, seed=3, device=device)


def _same(cpu_batch, gpu_batch) -> None:
    for key in ("x", "y", "edge_index", "n_id", "e_id"):
        value = gpu_batch[key]
        assert value.is_cuda, key
        assert torch.equal(value.cpu(), cpu_batch[key]), key
    assert gpu_batch.batch_size == cpu_batch.batch_size


@pytest.mark.parametrize("prefetch", [0, 1, 4])
def test_batches_on_the_gpu_equal_the_cpu_batches(served_fake, prefetch):
    _, stores = served_fake
    reference = list(_loader(stores, 0))
    batches = list(_loader(stores, prefetch, device="cuda"))
    assert len(batches) == len(reference) == 10
    for cpu_batch, gpu_batch in zip(reference, batches):
        _same(cpu_batch, gpu_batch)


def test_prefetched_batches_survive_compute_on_the_consumer_stream(served_fake):
    # The copy ran on a side stream; the consumer's stream must wait for it,
    # and the allocator must not hand the memory out again while in use.
    _, stores = served_fake
    reference = list(_loader(stores, 0))
    sums = []
    for batch in _loader(stores, 4, device="cuda"):
        big = torch.randn(2048, 2048, device="cuda")  # keep the GPU busy meanwhile
        sums.append(float((batch.x.sum() + (big @ big).mean() * 0).cpu()))
    expected = [float(b.x.sum()) for b in reference]
    assert sums == pytest.approx(expected, rel=1e-5)


def test_prefetch_uses_pinned_memory_and_a_side_stream(served_fake):
    from pyg_dist.loader.prefetch import _CudaMover

    _, stores = served_fake
    mover = _CudaMover(torch.device("cuda"))
    batch = next(iter(_loader(stores, 0)))
    x = batch.x.clone()
    moved, event = mover.to_device(batch)  # PyG's Data.to moves in place
    assert mover.stream != torch.cuda.current_stream()
    assert moved.x.is_cuda and isinstance(event, torch.cuda.Event)
    out = mover.hand_over(moved, event)
    torch.cuda.synchronize()
    assert torch.equal(out.x.cpu(), x)
    assert next(iter(_loader(stores, 0))).pin_memory().x.is_pinned()


@pytest.mark.timeout(900)
def test_launch_trains_on_the_gpu_with_nccl(tmp_path):
    # The synthetic graph (its labels shift the features): GPU machines need
    # not carry the graphdatascience wheel that Cora comes in.
    root = tmp_path / "fake2"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    subprocess.run([sys.executable, "-m", "pyg_dist", "partition", "pyg_dist.datasets:fake",
                    str(root), "--num-parts", "2"], check=True, env=env, timeout=300)
    proc = run_process_tree(
        [sys.executable, "-m", "pyg_dist", "launch", str(root), "--nproc", "1", "--",
         str(REPO / "examples" / "train_sage_dist.py"), "--epochs", "5", "--device", "cuda"],
        timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("test_acc="), proc.stdout[-2000:]
    assert float(last.split("=")[1]) > 0.5


def test_features_are_assembled_in_pinned_memory_for_the_gpu(served_fake):
    from pyg_dist.store.remote_feature_store import pinned_outputs

    data, (fs, _) = served_fake
    ids = torch.arange(0, 2000, 7)
    assert not fs[None, "x", ids].is_pinned()
    with pinned_outputs():
        x = fs[None, "x", ids]
    assert x.is_pinned()
    assert torch.equal(x, data.x[ids])
