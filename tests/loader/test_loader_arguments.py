"""Every DataLoader / NodeLoader argument is honoured or refused, per path.

The three paths: synchronous (``prefetch=0``), worker threads
(``prefetch=K``) and DataLoader worker processes (``num_workers > 0``). Every
refusal is a ``LoaderError`` naming the argument; every honoured argument is
checked for its effect on the batches (docs/loader.md has the table).
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader

from pyg_dist.errors import LoaderError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader

THREAD_PATHS = {"sync": {"prefetch": 0}, "prefetch": {"prefetch": 2}}
ALL_PATHS = {**THREAD_PATHS, "workers": {"num_workers": 2}}


def _seeds(loader) -> list[list[int]]:
    return [b.n_id[:b.batch_size].tolist() for b in loader]


def _loader(stores, **kwargs) -> DistNeighborLoader:
    kwargs.setdefault("num_neighbors", [2])
    kwargs.setdefault("input_nodes", torch.arange(0, 2708, 100))  # 28 inputs
    kwargs.setdefault("batch_size", 10)
    kwargs.setdefault("seed", 0)
    return DistNeighborLoader(stores, **kwargs)


# Refused everywhere ########################################################


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("name, value", [
    ("collate_fn", lambda items: items),
    ("dataset", range(3)),
    ("input_id", torch.arange(28)),
])
def test_arguments_the_loader_builds_itself_are_refused(cora_stores3, path, name, value):
    # PyG's NodeLoader drops collate_fn and dataset without a word.
    with pytest.raises(LoaderError, match=f"does not take {name}="):
        _loader(cora_stores3, **ALL_PATHS[path], **{name: value})


@pytest.mark.parametrize("settings, match", [
    ({"input_time": torch.zeros(28, dtype=torch.long)}, "input_time is set while time_attr"),
    ({"weight_attr": "edge_w"}, "weight_attr 'edge_w' is not an edge attribute"),
    ({"time_attr": "t"}, "time_attr 't' is neither a node nor an edge attribute"),
    ({"temporal_strategy": "last"}, "needs a time_attr"),
    ({"temporal_strategy": "newest"}, "temporal_strategy must be"),
])
def test_bad_temporal_and_weighted_settings_are_refused(cora_stores3, settings, match):
    with pytest.raises(LoaderError, match=match):
        _loader(cora_stores3, **settings)


def test_batch_size_none_and_invalid_dataloader_combinations_are_loader_errors(cora_stores3):
    with pytest.raises(LoaderError, match="batch_size=None"):
        _loader(cora_stores3, batch_size=None)
    # torch's own check (batch_sampler excludes batch_size), as a LoaderError.
    with pytest.raises(LoaderError, match="batch_sampler"):
        _loader(cora_stores3, batch_size=4, batch_sampler=[[0, 1]])


# Worker-process options without worker processes ###########################


@pytest.mark.parametrize("path", THREAD_PATHS)
@pytest.mark.parametrize("name, value", [
    ("worker_init_fn", print), ("multiprocessing_context", "fork"),
    ("prefetch_factor", 4), ("persistent_workers", True), ("pin_memory_device", "cuda"),
])
def test_worker_process_options_are_refused_without_worker_processes(cora_stores3, path,
                                                                     name, value):
    with pytest.raises(LoaderError, match=f"{name}="):
        _loader(cora_stores3, **THREAD_PATHS[path], **{name: value})


def test_prefetch_threads_refuse_filtering_on_the_main_thread(cora_stores3):
    with pytest.raises(LoaderError, match="filter_per_worker=False"):
        _loader(cora_stores3, prefetch=2, filter_per_worker=False)
    _loader(cora_stores3, prefetch=2, filter_per_worker=True)  # what it does anyway


# DDP split ##################################################################


@pytest.mark.parametrize("name, value", [("generator", torch.Generator()),
                                         ("sampler", [0, 1]), ("batch_sampler", [[0, 1]])])
def test_the_ddp_split_refuses_its_own_order_arguments(cora_stores3, name, value):
    with pytest.raises(LoaderError, match=name):
        _loader(cora_stores3, rank=0, world_size=2, batch_size=1, **{name: value})


# Sampler settings with a ready sampler #####################################


@pytest.mark.parametrize("name, value", [("replace", True), ("disjoint", True),
                                         ("subgraph_type", "induced"), ("directed", False),
                                         ("timeout", 5.0), ("seed", 3)])
def test_sampler_settings_are_refused_beside_a_ready_sampler(cora_stores3, name, value):
    from pyg_dist.sampler import DistNeighborSampler

    sampler = DistNeighborSampler(cora_stores3, num_neighbors=[2], seed=0)
    kwargs = {"seed": None, name: value}
    with pytest.raises(LoaderError, match=f"{name}="):
        _loader(cora_stores3, neighbor_sampler=sampler, **kwargs)


def test_a_ready_sampler_brings_its_fanout_and_its_randomness(cora_stores3):
    from pyg_dist.sampler import DistNeighborSampler

    def sampler():
        return DistNeighborSampler(cora_stores3, num_neighbors=[3, 1], seed=4)

    with pytest.raises(LoaderError, match="differs from the neighbor_sampler"):
        _loader(cora_stores3, neighbor_sampler=sampler(), num_neighbors=[2], seed=None)
    with pytest.raises(LoaderError, match="num_neighbors is required"):
        _loader(cora_stores3, num_neighbors=None)
    given = _loader(cora_stores3, neighbor_sampler=sampler(), num_neighbors=None, seed=None)
    built = _loader(cora_stores3, num_neighbors=[3, 1], seed=4)
    for a, b in zip(given, built, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    # Under DDP seed= also seeds the rank split's shuffle, so it is taken.
    _loader(cora_stores3, neighbor_sampler=sampler(), num_neighbors=None, seed=1,
            rank=0, world_size=2)


# Honoured: order and batching ###############################################


@pytest.mark.parametrize("path", THREAD_PATHS)
def test_sampler_and_batch_sampler_pick_the_batches(cora_stores3, path):
    inputs = torch.arange(0, 2708, 100)
    order = [27, 3, 14, 0, 9]
    loader = _loader(cora_stores3, **THREAD_PATHS[path], sampler=order, batch_size=2)
    assert _seeds(loader) == [[2700, 300], [1400, 0], [900]]
    loader = _loader(cora_stores3, **THREAD_PATHS[path], batch_size=1,
                     batch_sampler=[[5], [6, 7, 8], [1, 1]])
    assert _seeds(loader) == [inputs[[5]].tolist(), inputs[[6, 7, 8]].tolist(), [100, 100]]


@pytest.mark.parametrize("path", THREAD_PATHS)
def test_generator_decides_the_shuffle(cora_stores3, path):
    def order(seed: int) -> list[list[int]]:
        gen = torch.Generator().manual_seed(seed)
        return _seeds(_loader(cora_stores3, **THREAD_PATHS[path], shuffle=True,
                              generator=gen))

    torch.manual_seed(0)
    first = order(7)
    torch.manual_seed(1)  # the global RNG plays no part
    assert order(7) == first
    assert order(8) != first
    assert sorted(sum(first, [])) == list(range(0, 2708, 100))


@pytest.mark.parametrize("path", THREAD_PATHS)
def test_in_order_false_allows_what_these_paths_do_anyway(cora_stores3, path):
    ordered = _seeds(_loader(cora_stores3, **THREAD_PATHS[path]))
    assert _seeds(_loader(cora_stores3, **THREAD_PATHS[path], in_order=False)) == ordered


# Honoured: batches ##########################################################


class TaggedData(Data):
    """A ``Data`` subclass for ``custom_cls``."""


@pytest.mark.parametrize("path", THREAD_PATHS)
def test_custom_cls_and_transform_sampler_output(cora_data, cora_stores3, path):
    def drop_edges(out):
        out.row, out.col, out.edge = out.row[:0], out.col[:0], out.edge[:0]
        return out

    for batch in _loader(cora_stores3, **THREAD_PATHS[path], custom_cls=TaggedData,
                         transform_sampler_output=drop_edges):
        assert isinstance(batch, TaggedData)
        assert batch.edge_index.size(1) == 0 and batch.e_id.numel() == 0
        assert torch.equal(batch.x, cora_data.x[batch.n_id])


@pytest.mark.parametrize("path", ALL_PATHS)
def test_device_moves_batches_on_every_path(cora_stores3, path):
    # The meta device stands in for an accelerator: a copy there is visible.
    batches = list(_loader(cora_stores3, **ALL_PATHS[path], device="meta"))
    assert len(batches) == 3
    assert all(b.x.device.type == "meta" and b.edge_index.device.type == "meta"
               for b in batches)


def test_is_sorted_is_a_hint_with_the_same_batches(cora_stores3):
    a, b = _loader(cora_stores3, is_sorted=False), _loader(cora_stores3, is_sorted=True)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.n_id, y.n_id) and torch.equal(x.edge_index, y.edge_index)


# pin_memory #################################################################


def _pin_warnings(make_batches) -> tuple[list[str], list[bool]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pinned = [b.x.is_pinned() for b in make_batches()]
    return [str(w.message) for w in caught if "pin_memory" in str(w.message)], pinned


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only behaviour")
@pytest.mark.parametrize("path", ALL_PATHS)
def test_pin_memory_without_an_accelerator_behaves_as_pygs_loader(cora_data, cora_stores3,
                                                                  path):
    theirs = _pin_warnings(lambda: NeighborLoader(
        cora_data, num_neighbors=[2], input_nodes=torch.arange(0, 2708, 100), batch_size=10,
        pin_memory=True))
    ours = _pin_warnings(lambda: _loader(cora_stores3, **ALL_PATHS[path], pin_memory=True))
    assert theirs[0] and set(ours[0]) == set(theirs[0])  # torch's warning, same words
    assert ours[1] == theirs[1] == [False, False, False]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("filter_per_worker", [True, False])
def test_pin_memory_pins_batches_with_cuda(cora_stores3, path, filter_per_worker):
    if path == "prefetch" and not filter_per_worker:
        pytest.skip("refused on this path")
    loader = _loader(cora_stores3, **ALL_PATHS[path], pin_memory=True,
                     filter_per_worker=filter_per_worker)
    for batch in loader:
        assert batch.x.is_pinned() and batch.edge_index.is_pinned() and batch.n_id.is_pinned()


# Worker processes ###########################################################


def _mark_worker(worker_id: int) -> None:
    os.environ["PYG_DIST_TEST_WORKER"] = f"initialised-{worker_id}"


def _stamp(batch: Data) -> Data:
    batch.pid = os.getpid()
    batch.worker = os.environ.get("PYG_DIST_TEST_WORKER", "none")
    return batch


def test_worker_init_fn_runs_in_each_worker_process(cora_stores3):
    batches = list(_loader(cora_stores3, num_workers=2, worker_init_fn=_mark_worker,
                           transform=_stamp, filter_per_worker=True))
    assert {b.worker for b in batches} == {"initialised-0", "initialised-1"}
    assert os.getpid() not in {b.pid for b in batches}


def test_filter_per_worker_decides_where_features_are_joined(cora_data, cora_stores3):
    in_workers = list(_loader(cora_stores3, num_workers=2, transform=_stamp))  # PyG's default
    in_main = list(_loader(cora_stores3, num_workers=2, transform=_stamp,
                           filter_per_worker=False))
    assert os.getpid() not in {b.pid for b in in_workers}
    assert {b.pid for b in in_main} == {os.getpid()}
    for batch in in_workers + in_main:
        assert torch.equal(batch.x, cora_data.x[batch.n_id])


@pytest.mark.parametrize("persistent", [True, False])
def test_persistent_workers_keep_their_processes_between_epochs(cora_stores3, persistent):
    loader = _loader(cora_stores3, num_workers=1, transform=_stamp,
                     persistent_workers=persistent, prefetch_factor=1)
    first, second = ({b.pid for b in loader} for _ in range(2))
    assert (first == second) == persistent


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_worker_processes_that_would_pickle_the_stores_are_refused(cora_stores3, context):
    with pytest.raises(LoaderError, match="multiprocessing_context"):
        _loader(cora_stores3, num_workers=1, multiprocessing_context=context)


def test_forked_worker_processes_are_honoured(cora_data, cora_stores3):
    import multiprocessing

    for context in ("fork", multiprocessing.get_context("fork")):
        batches = list(_loader(cora_stores3, num_workers=1, multiprocessing_context=context))
        assert [b.batch_size for b in batches] == [10, 10, 8]
        assert all(torch.equal(b.x, cora_data.x[b.n_id]) for b in batches)
