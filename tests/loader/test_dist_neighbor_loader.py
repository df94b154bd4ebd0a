"""DistNeighborLoader's PyG surface: batches, inputs, shuffling, DDP split, prefetch."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.errors import LoaderError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader


def _ids(loader) -> list[list[int]]:
    return [b.n_id[:b.batch_size].tolist() for b in loader]


def test_batches_carry_pyg_attributes(cora_data, cora_stores3):
    loader = DistNeighborLoader(cora_stores3, num_neighbors=[4, 2],
                                input_nodes=cora_data.train_mask, batch_size=64, seed=0)
    assert len(loader) == 3  # 140 train nodes
    sizes = []
    for batch in loader:
        for key in ("x", "edge_index", "y", "n_id", "e_id", "input_id", "batch_size",
                    "num_sampled_nodes", "num_sampled_edges"):
            assert key in batch, key
        assert batch.x.shape == (batch.num_nodes, 1433) and batch.x.dtype == torch.float32
        assert torch.equal(batch.x, cora_data.x[batch.n_id])
        assert torch.equal(batch.y, cora_data.y[batch.n_id])
        # As in PyG, a mask's input_id holds the node ids themselves.
        assert torch.equal(batch.n_id[:batch.batch_size], batch.input_id)
        sizes.append(batch.batch_size)
    assert sizes == [64, 64, 12]


def test_input_nodes_as_mask_ids_tuple_or_none(cora_data, cora_stores3):
    mask = cora_data.test_mask
    kw = dict(num_neighbors=[1], batch_size=500, seed=0)
    by_mask = _ids(DistNeighborLoader(cora_stores3, input_nodes=mask, **kw))
    by_ids = _ids(DistNeighborLoader(cora_stores3, input_nodes=mask.nonzero().view(-1), **kw))
    by_tuple = _ids(DistNeighborLoader(cora_stores3, input_nodes=(None, mask), **kw))
    assert by_mask == by_ids == by_tuple
    everything = DistNeighborLoader(cora_stores3, input_nodes=None, **kw)
    assert len(everything) == 6  # ceil(2708 / 500)
    assert sum(len(ids) for ids in _ids(everything)) == 2708


def test_shuffle_drop_last_and_transform(cora_data, cora_stores3):
    kw = dict(num_neighbors=[2], input_nodes=cora_data.train_mask, batch_size=64)
    torch.manual_seed(3)
    first = _ids(DistNeighborLoader(cora_stores3, shuffle=True, seed=1, **kw))
    torch.manual_seed(3)
    again = _ids(DistNeighborLoader(cora_stores3, shuffle=True, seed=1, **kw))
    assert first == again
    assert sorted(sum(first, [])) == sorted(cora_data.train_mask.nonzero().view(-1).tolist())
    assert first != _ids(DistNeighborLoader(cora_stores3, shuffle=False, **kw))
    dropped = DistNeighborLoader(cora_stores3, drop_last=True, **kw)
    assert [len(ids) for ids in _ids(dropped)] == [64, 64]

    def mark(batch):
        batch.marked = True
        return batch

    assert all(b.marked for b in DistNeighborLoader(cora_stores3, transform=mark, **kw))


def test_prefetch_yields_the_same_batches_as_the_synchronous_path(cora_data, cora_stores3):
    kw = dict(num_neighbors=[5, 5], input_nodes=cora_data.val_mask, batch_size=50, seed=11)
    sync = list(DistNeighborLoader(cora_stores3, prefetch=0, **kw))
    ahead = list(DistNeighborLoader(cora_stores3, prefetch=3, **kw))
    assert len(sync) == len(ahead) == 10
    for a, b in zip(sync, ahead):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.e_id, b.e_id) and torch.equal(a.x, b.x)


@pytest.mark.parametrize("drop_last", [False, True])
def test_ddp_ranks_split_inputs_and_take_the_same_number_of_steps(cora_stores3, drop_last):
    inputs = torch.arange(0, 2708, 27)  # 101 inputs: odd, so the split needs care
    loaders = [DistNeighborLoader(cora_stores3, num_neighbors=[2], input_nodes=inputs,
                                  batch_size=10, shuffle=True, drop_last=drop_last, seed=5,
                                  rank=r, world_size=2) for r in range(2)]
    assert len(loaders[0]) == len(loaders[1])
    for epoch in range(2):
        seen = [sum(_ids(loader), []) for loader in loaders]
        assert len(seen[0]) == len(seen[1]) == (50 if drop_last else 51)
        union = set(seen[0]) | set(seen[1])
        if drop_last:  # truncated: one input left out, none twice
            assert len(union) == 100 and not set(seen[0]) & set(seen[1])
        else:  # padded by wrapping: every input, one of them twice
            assert union == set(inputs.tolist())
        if epoch == 0:
            first_epoch = seen
    assert seen != first_epoch  # reshuffled every epoch, identically on both ranks


def test_one_feature_request_per_server_per_batch(cora_data, cora_stores3):
    fs, gs = cora_stores3
    loader = DistNeighborLoader(cora_stores3, num_neighbors=[-1, -1],
                                input_nodes=torch.arange(0, 2708, 50), batch_size=64, seed=0)
    client = fs.router.client
    calls = []
    original = client.call_async

    def counting(server, op, *args, **kwargs):
        calls.append((server, op))
        return original(server, op, *args, **kwargs)

    client.call_async = counting
    try:
        batch = next(iter(loader))
    finally:
        del client.call_async
    gets = [c for c in calls if c[1] == "get"]
    owners = set(gs.book.part_of(batch.n_id).tolist())
    assert sorted(s for s, _ in gets) == sorted(owners)  # x, y and masks in one request
    assert len([c for c in calls if c[1] == "sample"]) <= 2 * gs.router.num_parts  # hops


def test_bad_arguments_raise_loader_errors(cora_data, cora_stores3):
    with pytest.raises(LoaderError, match="pyg_dist.connect"):
        DistNeighborLoader(cora_data, num_neighbors=[1])
    with pytest.raises(LoaderError, match="time_attr"):
        DistNeighborLoader(cora_stores3, num_neighbors=[1], time_attr="t")
    with pytest.raises(LoaderError, match="outside"):
        DistNeighborLoader(cora_stores3, num_neighbors=[1], input_nodes=torch.tensor([9999]))
    with pytest.raises(LoaderError, match="mask"):
        DistNeighborLoader(cora_stores3, num_neighbors=[1], input_nodes=torch.ones(5).bool())
    with pytest.raises(LoaderError, match="rank"):
        DistNeighborLoader(cora_stores3, num_neighbors=[1], rank=2, world_size=2)
    with pytest.raises(LoaderError, match="prefetch"):
        DistNeighborLoader(cora_stores3, num_neighbors=[1], prefetch=-1)
    with pytest.raises(LoaderError, match="alternatives"):
        DistNeighborLoader(cora_stores3, num_neighbors=[1], prefetch=2, num_workers=2)


def test_dataloader_worker_processes_open_their_own_connections(cora_data, cora_stores3):
    kw = dict(num_neighbors=[3, 2], input_nodes=cora_data.train_mask, batch_size=32, seed=0)
    batches = list(DistNeighborLoader(cora_stores3, num_workers=2, **kw))
    assert [b.batch_size for b in batches] == [32, 32, 32, 32, 12]
    for batch in batches:
        assert torch.equal(batch.x, cora_data.x[batch.n_id])
        src, dst = cora_data.edge_index[:, batch.e_id]
        assert torch.equal(batch.n_id[batch.edge_index[0]], src)
