"""An embedding served as a node attribute (``attr_name``) rides in the
loader's batches like any feature, through the remote feature store and a
``CachedFeatureStore`` in front of it (never cached: it changes), with
autograd from the batch's rows back to the table: training through the
loader equals torch's ``nn.Embedding`` on the same batches."""

from __future__ import annotations

import pytest
import torch
from embedding_support import serving

import pyg_dist
from pyg_dist.embedding import DistEmbedding
from pyg_dist.errors import EmbeddingError, StoreError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.cached_feature_store import CachedFeatureStore
from pyg_dist.store.connect import connect

DIM = 6


def _init(ids: torch.Tensor) -> torch.Tensor:
    return torch.cos(ids.to(torch.float32).view(-1, 1) * 0.11 + torch.arange(DIM))


@pytest.fixture
def stores(served, cora_roots):
    # Its own connection: add_embedding changes the feature store it is given.
    fs, _ = served[2]
    own_fs, own_gs = connect(fs.router.endpoints)
    with own_fs:
        yield own_fs, own_gs


def _loss(batch, x: torch.Tensor) -> torch.Tensor:
    """A sum over each seed's sampled edges: every row of the batch counts."""
    src, dst = batch.edge_index
    agg = torch.zeros_like(x).index_add(0, dst, x[src])
    return (agg[:batch.batch_size] + x[:batch.batch_size]).pow(2).mean()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_training_through_batches_equals_torch(stores, prefetch):
    fs, gs = stores
    emb = DistEmbedding((fs, gs), f"batches-{prefetch}", DIM, init=_init, attr_name="emb")
    local = torch.nn.Embedding(fs.num_nodes, DIM, sparse=True)
    with torch.no_grad():
        local.weight.copy_(_init(torch.arange(fs.num_nodes)))
    dist_opt = pyg_dist.optim.SGD([emb], lr=0.2)
    local_opt = torch.optim.SGD(local.parameters(), lr=0.2)
    loader = DistNeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=64, shuffle=True,
                                seed=3, prefetch=prefetch)
    steps = 0
    for batch in loader:
        assert batch.emb.shape == (batch.num_nodes, DIM) and batch.emb.requires_grad
        dist_opt.zero_grad()
        local_opt.zero_grad()
        _loss(batch, batch.emb).backward()
        _loss(batch, local(batch.n_id)).backward()
        dist_opt.step()
        local_opt.step()
        steps += 1
        if steps == 5:
            break
    if prefetch == 0:  # each batch read after the previous step: exact
        torch.testing.assert_close(emb.read(torch.arange(fs.num_nodes)),
                                   local.weight.detach(), rtol=0, atol=1e-6)
    else:  # prefetched batches read rows a few steps old: asynchronous, as documented
        moved = emb.read(torch.arange(fs.num_nodes)) != _init(torch.arange(fs.num_nodes))
        assert moved.any()


def test_a_cached_store_passes_embeddings_through_uncached(stores):
    fs, gs = stores
    emb = DistEmbedding((fs, gs), "cached", DIM, init=_init, attr_name="emb")
    cached = CachedFeatureStore(fs, capacity=500, graph_store=gs)
    loader = DistNeighborLoader((cached, gs), num_neighbors=[2], batch_size=32)
    batch = next(iter(loader))
    assert torch.equal(batch.emb.detach(), emb.read(batch.n_id))
    assert torch.equal(batch.x, cached.remote.get_tensor(None, "x", batch.n_id))
    pyg_dist.optim.SGD([emb], lr=1.0).step()  # no gradient yet: nothing sent
    batch.emb.sum().backward()
    opt = pyg_dist.optim.SGD([emb], lr=1.0)
    opt.step()
    again = next(iter(loader))  # the next batch sees the update, not a cached copy
    assert torch.equal(again.emb.detach(), _init(again.n_id) - 1.0 * torch.isin(
        again.n_id, batch.n_id).view(-1, 1))
    assert ("emb" in {a.attr_name for a in cached.get_all_tensor_attrs()})


def test_an_attribute_name_the_servers_hold_is_refused(stores):
    fs, gs = stores
    with pytest.raises(StoreError, match="already has an attribute 'x'"):
        DistEmbedding((fs, gs), "clash", DIM, attr_name="x")


def test_a_heterogeneous_batch_carries_the_rows_of_its_node_type(hetero_data, tmp_path):
    root = str(tmp_path / "hetero")
    partition(hetero_data, 2, root)
    with serving(root, 2) as servers:
        fs, gs = connect([s.endpoint for s in servers])
        with fs:
            _hetero_batch(fs, gs)


def _hetero_batch(fs, gs) -> None:
    """One batch from v0 seeds: its v1 nodes carry their rows; a step moves them."""
    emb = DistEmbedding((fs, gs), "v1-emb", DIM, init=_init, node_type="v1",
                        attr_name="emb")
    loader = DistNeighborLoader((fs, gs), num_neighbors=[3, 3], batch_size=16,
                                input_nodes=("v0", None))
    batch = next(iter(loader))
    assert "emb" not in batch["v0"] and batch["v1"].n_id.numel() > 0
    assert torch.equal(batch["v1"].emb.detach(), _init(batch["v1"].n_id))
    batch["v1"].emb.sum().backward()
    pyg_dist.optim.SGD([emb], lr=1.0).step()
    torch.testing.assert_close(emb.read(batch["v1"].n_id), _init(batch["v1"].n_id) - 1)


def test_an_embedding_refuses_to_be_copied_to_another_process(stores):
    import pickle

    fs, gs = stores
    emb = DistEmbedding((fs, gs), "unpicklable", DIM, attr_name="emb")
    with pytest.raises(EmbeddingError, match="cannot be copied to another process"):
        pickle.dumps(emb)


def test_a_loader_worker_process_cannot_read_an_embedding_with_autograd(stores):
    fs, gs = stores
    DistEmbedding((fs, gs), "in-workers", DIM, init=_init, attr_name="emb")
    loader = DistNeighborLoader((fs, gs), num_neighbors=[2], batch_size=16, num_workers=1)
    with pytest.raises(Exception, match="forked process"):
        next(iter(loader))
