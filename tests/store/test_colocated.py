"""``pyg_dist.connect(colocate=True)``: the parts whose servers run on this
host are mapped from their files and answered in the trainer's process.

Every test runs real ``pyg-dist serve`` processes (or real servers in this
process) over real partition files: a colocated batch must equal the batch
the servers send, no read may reach a colocated part's server, the
embeddings (state on the servers) must still go there, and a directory that
holds another graph must be refused or passed over.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from support.forwarding_servers import forwarding_servers

import pyg_dist
from pyg_dist.embedding import DistEmbedding
from pyg_dist.errors import StoreError
from pyg_dist.loader.dist_link_neighbor_loader import DistLinkNeighborLoader
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.connect import connect


def _reads(fs) -> list[tuple[int, int]]:
    """Per part, the ``get`` calls and ``sample`` answers its server served
    (asked through ``fs``'s own, socket-only, client)."""
    client = fs.router.client
    return [(client.call(p, "stats", {}, timeout=10.0).result["get_calls"],
             client.call(p, "stats", {}, timeout=10.0).result["get_rows"])
            for p in range(fs.router.num_parts)]


def _batches(stores, **kwargs) -> list:
    loader = DistNeighborLoader(stores, num_neighbors=[4, 3], batch_size=96, seed=7,
                                input_nodes=torch.arange(600), server_hops=False, **kwargs)
    return list(loader)


def _assert_same(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        for key in ("n_id", "e_id", "edge_index", "x", "y", "batch_size",
                    "num_sampled_nodes", "num_sampled_edges"):
            assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


@pytest.mark.parametrize("parts", [2, 3])
def test_colocated_batches_equal_the_servers_and_never_reach_them(served_cora, parts):
    fs, gs = served_cora.get(parts)
    expected = _batches((fs, gs))
    before = _reads(fs)
    cfs, cgs = connect(fs.router.endpoints, colocate=True)
    with cfs:
        assert cfs.colocated_parts == cgs.colocated_parts == tuple(range(parts))
        for prefetch in (0, 2):
            _assert_same(_batches((cfs, cgs), prefetch=prefetch), expected)
        assert cfs.router.copied_rows > 0  # the rows came back as tensors, copied in
    assert _reads(fs) == before  # no get reached a server


def test_parts_under_another_directory_are_asked_over_the_socket(cora2_root, tmp_path):
    # Part 1's server reads a copy: colocate=True maps one directory, so
    # part 1 stays remote and a batch mixes a mapped part and a served one.
    copy = tmp_path / "copy"
    shutil.copytree(cora2_root, copy)
    with forwarding_servers(cora2_root, parts=(0,)) as first, \
            forwarding_servers(copy, parts=(1,)) as second:
        endpoints = first + second
        fs, gs = connect(endpoints)
        with fs:
            expected = _batches((fs, gs))
            before = _reads(fs)
            cfs, cgs = connect(endpoints, colocate=True)
            with cfs:
                assert len(cgs.colocated_parts) == 1
                _assert_same(_batches((cfs, cgs)), expected)
            after = _reads(fs)
            mapped = cgs.colocated_parts[0]
            assert after[mapped] == before[mapped]
            assert after[1 - mapped][0] > before[1 - mapped][0]


def test_a_directory_of_another_graph_is_refused(served_cora, tmp_path, cora_data):
    fs, _ = served_cora.get(2)
    other = tmp_path / "other"
    partition(cora_data, 2, str(other), partitioner="random")
    with pytest.raises(StoreError, match="colocate: .*holds .*the servers serve"):
        connect(fs.router.endpoints, colocate=other)
    with pytest.raises(StoreError, match="not a partitioned dataset"):
        connect(fs.router.endpoints, colocate=tmp_path / "missing")
    with pytest.raises(StoreError, match="colocate must be True, False or a dataset"):
        connect(fs.router.endpoints, colocate=3)


def test_the_directory_the_servers_name_can_be_given(served_cora):
    fs, gs = served_cora.get(2)
    root = fs.router.client.call(0, "meta", {}, timeout=10.0).result["root"]
    cfs, cgs = connect(fs.router.endpoints, colocate=root)
    with cfs:
        assert cgs.colocated_parts == (0, 1)
        _assert_same(_batches((cfs, cgs)), _batches((fs, gs)))


def test_heterogeneous_batches_equal_the_servers(served_hetero):
    fs, gs = served_hetero.get(2)
    cfs, cgs = connect(fs.router.endpoints, colocate=True)
    kwargs = dict(num_neighbors=[3, 2], batch_size=40, seed=5,
                  input_nodes=("v0", torch.arange(200)))
    with cfs:
        assert cgs.colocated_parts == (0, 1)
        ours = list(DistNeighborLoader((cfs, cgs), **kwargs))
    theirs = list(DistNeighborLoader((fs, gs), **kwargs))
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        for node_type in a.node_types:
            assert torch.equal(a[node_type].n_id, b[node_type].n_id)
            assert torch.equal(a[node_type].x, b[node_type].x)
        for edge_type in a.edge_types:
            assert torch.equal(a[edge_type].edge_index, b[edge_type].edge_index)


def test_a_worker_process_maps_the_parts_again(served_cora, cora_data):
    # Batches from worker processes are not the synchronous ones (their
    # seeds differ), so each is checked against the graph itself.
    fs, _ = served_cora.get(2)
    cfs, cgs = connect(fs.router.endpoints, colocate=True)
    with cfs:
        batches = _batches((cfs, cgs), num_workers=1)
    assert len(batches) == 7
    edges = set(map(tuple, cora_data.edge_index.t().tolist()))
    for batch in batches:
        assert torch.equal(batch.x, cora_data.x[batch.n_id])
        assert torch.equal(batch.y, cora_data.y[batch.n_id])
        src, dst = batch.n_id[batch.edge_index]
        assert all((s, d) in edges for s, d in zip(src.tolist(), dst.tolist()))


def test_embeddings_stay_on_their_servers(served_cora):
    # emb_* ops hold state on the servers: a colocated part must send them,
    # and a step's update must reach the rows the next batch reads.
    fs, _ = served_cora.get(2)
    cfs, cgs = connect(fs.router.endpoints, colocate=True)

    def init(ids: torch.Tensor) -> torch.Tensor:
        return ids.to(torch.float32).view(-1, 1).repeat(1, 4)

    with cfs:
        emb = DistEmbedding((cfs, cgs), "colocated", 4, init=init, attr_name="emb")
        ids = torch.tensor([0, 5, cfs.num_nodes - 1])
        loader = DistNeighborLoader((cfs, cgs), num_neighbors=[2], input_nodes=ids,
                                    batch_size=3)
        batch = next(iter(loader))
        assert torch.equal(batch.emb.detach(), init(batch.n_id))
        optimizer = pyg_dist.optim.SGD([emb], lr=1.0)
        batch.emb[:3].sum().backward()
        optimizer.step()
        emb.flush()
        assert torch.equal(emb.read(ids), init(ids) - 1)
        assert torch.equal(next(iter(loader)).emb[:3].detach(), init(ids) - 1)


def _prefetch_threads(loader) -> int:
    """The most prefetch worker threads alive while ``loader`` ran an epoch."""
    import threading

    seen = 0
    for _ in loader:
        seen = max(seen, sum(t.name.startswith("pyg-dist-prefetch")
                             for t in threading.enumerate()))
    return seen


def test_a_colocated_loader_prefetches_on_one_thread(served_cora):
    fs, gs = served_cora.get(2)
    kwargs = dict(num_neighbors=[2], batch_size=64, prefetch=3, input_nodes=torch.arange(640))
    assert _prefetch_threads(DistNeighborLoader((fs, gs), **kwargs)) > 1
    cfs, cgs = connect(fs.router.endpoints, colocate=True)
    with cfs:
        loader = DistNeighborLoader((cfs, cgs), **kwargs)
        assert _prefetch_threads(loader) == 1
        assert loader.node_sampler.server_hops is False  # every part here: hop by hop


def test_meta_names_the_directory_served(cora2_root):
    with forwarding_servers(cora2_root, parts=(0, 1)) as endpoints:
        fs, _ = connect(endpoints)
        with fs:
            meta = fs.router.client.call(1, "meta", {}, timeout=10.0).result
    assert meta["root"] == str(cora2_root.resolve())
    assert pyg_dist.PartitionReader(meta["root"]).graph_id == meta["graph"]


def test_init_trainer_passes_colocate_on(served_cora, cora_data):
    # The porting checklist's one-word opt-in: init_trainer(colocate=True).
    fs, _ = served_cora.get(2)
    dataset = pyg_dist.init_trainer(fs.router.endpoints, colocate=True)
    data = dataset[0]
    stores = (data.feature_store, data.graph_store)
    try:
        assert stores[1].colocated_parts == (0, 1)
        loader = DistNeighborLoader(data, num_neighbors=[3], batch_size=50,
                                    input_nodes=torch.arange(50))
        batch = next(iter(loader))
        assert torch.equal(batch.x, cora_data.x[batch.n_id])
    finally:
        stores[0].close()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_colocated_link_batches_equal_the_servers(served_cora, cora_data, prefetch):
    fs, gs = served_cora.get(2)
    kwargs = dict(num_neighbors=[3, 2], edge_label_index=cora_data.edge_index[:, :300],
                  batch_size=64, seed=4, neg_sampling="binary", server_hops=False)
    cfs, cgs = connect(fs.router.endpoints, colocate=True)
    with cfs:
        ours = list(DistLinkNeighborLoader((cfs, cgs), prefetch=prefetch, **kwargs))
    theirs = list(DistLinkNeighborLoader((fs, gs), **kwargs))
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs):
        for key in ("n_id", "edge_index", "x", "edge_label_index", "edge_label"):
            assert torch.equal(a[key], b[key]), key


def test_a_directory_a_server_names_is_checked_before_it_is_opened(served_cora, cora_data,
                                                                   tmp_path, caplog):
    # What a lying same-host server could name: nothing here may raise, hang
    # or map a part; each part goes over the socket, and the log says why.
    import dataclasses
    import logging
    import os

    from pyg_dist.routing.servers import parse_meta
    from pyg_dist.server.colocated import colocate

    fs, _ = served_cora.get(2)
    client = fs.router.client
    metas = [parse_meta(fs.router.endpoints[p], client.call(p, "meta", {}, timeout=10.0))
             for p in range(2)]
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "meta.json")
    other = tmp_path / "other"
    partition(cora_data, 2, str(other), partitioner="random")  # another graph
    lies = ["relative/dir", "/abs\0with-nul", "/" + "x" * 5000, {"a": 1}, None,
            str(fifo_dir), str(tmp_path / "missing"), str(other)]
    for lie in lies:
        lying = [dataclasses.replace(m, result={**m.result, "root": lie}) for m in metas]
        with caplog.at_level(logging.INFO, logger="pyg_dist.server.colocated"):
            caplog.clear()
            assert colocate(lying) is None, lie
        assert "over the socket" in caplog.text, lie


def test_server_hops_asked_for_are_honoured_and_equal(served_cora):
    # server_hops=True with every part here: the tree runs on a server, its
    # rows are read in process afterwards; the batches do not change.
    fs, gs = served_cora.get(2)
    kwargs = dict(num_neighbors=[4, 3], batch_size=96, seed=7, input_nodes=torch.arange(600),
                  server_hops=True)
    theirs = list(DistNeighborLoader((fs, gs), **kwargs))
    cfs, cgs = connect(fs.router.endpoints, colocate=True)
    with cfs:
        loader = DistNeighborLoader((cfs, cgs), prefetch=2, **kwargs)
        assert loader.node_sampler.server_hops is True
        _assert_same(list(loader), theirs)
