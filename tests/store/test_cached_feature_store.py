"""CachedFeatureStore on real servers: exact batches, bytes the servers did
not send, and typed errors for every bad way to build one."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.errors import CacheError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.store.cached_feature_store import CachedFeatureStore

SEEDS = torch.arange(0, 2708, 7)
FANOUT = [10, 5]


def served_get_bytes(fs) -> int:
    """Bytes of rows every server's ``get`` has served so far (counted by the servers)."""
    total = 0
    for part in range(fs.router.num_parts):
        reply = fs.router.client.call(part, "stats", {}, timeout=10.0)
        total += reply.result["get_bytes"]
    return total


def epoch(stores, prefetch: int) -> list:
    torch.manual_seed(5)  # the DataLoader shuffles with the global generator
    loader = DistNeighborLoader(stores, num_neighbors=FANOUT, input_nodes=SEEDS,
                                batch_size=64, shuffle=True, seed=11, prefetch=prefetch)
    return list(loader)


@pytest.fixture(scope="module")
def cora2(served_cora):
    return served_cora.get(2)


@pytest.mark.parametrize("policy,options", [
    ("degree", {}),
    ("frequency", {"num_neighbors": FANOUT, "input_nodes": SEEDS, "batch_size": 128}),
    ("halo", {"part": 0}),
])
@pytest.mark.parametrize("prefetch", [0, 4])
def test_batches_with_the_cache_equal_batches_without(cora2, policy, options, prefetch):
    fs, gs = cora2
    cached = CachedFeatureStore(fs, 0.3, policy, graph_store=gs, whole_attrs=["train_mask"],
                                policy_options=options)
    assert 0 < cached.report["cached_nodes"] <= int(0.3 * 2708)
    plain = epoch((fs, gs), prefetch)
    with_cache = epoch((cached, gs), prefetch)
    assert len(plain) == len(with_cache) > 0
    for a, b in zip(plain, with_cache):
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index, b.edge_index)
        for name in ("x", "y", "train_mask", "test_mask"):
            assert a[name].dtype == b[name].dtype
            assert torch.equal(a[name], b[name]), name
    stats = cached.cache_stats()
    assert stats["hits"] > 0 and stats["misses"] > 0
    lookups = sum(batch.num_nodes for batch in with_cache)
    assert stats["hits"] + stats["misses"] == lookups
    # x (float32), y (int64), val_mask and test_mask (bool) are cached per node.
    assert cached.row_bytes == 1433 * 4 + 8 + 1 + 1
    assert stats["bytes_saved"] == stats["hits"] * cached.row_bytes


def test_the_servers_send_fewer_bytes_with_the_cache(cora2):
    fs, gs = cora2
    cached = CachedFeatureStore(fs, 0.3, "frequency", graph_store=gs,
                                policy_options={"num_neighbors": FANOUT, "input_nodes": SEEDS})
    before = served_get_bytes(fs)
    epoch((fs, gs), 0)
    plain = served_get_bytes(fs) - before
    before = served_get_bytes(fs)
    epoch((cached, gs), 0)
    with_cache = served_get_bytes(fs) - before
    stats = cached.cache_stats()
    # The servers' own count of what they sent equals the cache's count of misses.
    assert with_cache == stats["bytes_fetched"]
    assert plain == stats["bytes_fetched"] + stats["bytes_saved"]
    assert with_cache < 0.7 * plain


def test_the_policies_choose_what_they_promise(cora_data, cora2):
    fs, gs = cora2
    degree = torch.bincount(cora_data.edge_index[1], minlength=2708)
    cached = CachedFeatureStore(fs, 100, "degree", graph_store=gs, attrs=["y"])
    assert cached.report["cached_nodes"] == 12  # 100 bytes // 8 bytes of y per node
    chosen = (cached._types[None].slot >= 0).nonzero().view(-1)
    assert int(degree[chosen].min()) >= int(torch.sort(degree, descending=True).values[11])
    halo = CachedFeatureStore(fs, 1.0, "halo", graph_store=gs, attrs=["y"],
                              policy_options={"part": 1})
    book = gs.book.part_of(torch.arange(2708))
    src, dst = cora_data.edge_index
    expected = set(src[(book[dst] == 1) & (book[src] != 1)].tolist())
    assert set((halo._types[None].slot >= 0).nonzero().view(-1).tolist()) == expected


def test_a_third_party_policy_callable_is_used_and_checked(cora2):
    fs, gs = cora2

    def first_ten(context, budget):
        return torch.arange(10, 0, -1)

    cached = CachedFeatureStore(fs, 1.0, first_ten, attrs=["y"])
    assert cached.report["policy"] == "first_ten" and cached.report["cached_nodes"] == 10
    assert torch.equal(cached.get_tensor(None, "y", torch.arange(12)),
                       fs.get_tensor(None, "y", torch.arange(12)))

    for answer, message in [(torch.tensor([0.5]), "dtype"), (torch.tensor([2708]), "outside"),
                            ([1, 2], "expected a 1-D")]:
        with pytest.raises(CacheError, match=message):
            CachedFeatureStore(fs, 1.0, lambda context, budget, a=answer: a)


@pytest.mark.parametrize("capacity,message", [
    (-1, ">= 0 bytes"), (0.0, r"\(0, 1\]"), (1.5, r"\(0, 1\]"), (True, "bytes"), ("1GB", "bytes"),
])
def test_bad_capacities_are_refused(cora2, capacity, message):
    fs, gs = cora2
    with pytest.raises(CacheError, match=message):
        CachedFeatureStore(fs, capacity, "degree", graph_store=gs)


def test_bad_policies_and_options_are_refused(cora2):
    fs, gs = cora2
    with pytest.raises(CacheError, match="no cache policy 'nope'.*degree"):
        CachedFeatureStore(fs, 0.1, "nope", graph_store=gs)
    with pytest.raises(CacheError, match="refused its options"):
        CachedFeatureStore(fs, 0.1, "degree", graph_store=gs, policy_options={"fanout": 3})
    with pytest.raises(CacheError, match="needs num_neighbors"):
        CachedFeatureStore(fs, 0.1, "frequency", graph_store=gs)
    with pytest.raises(CacheError, match="needs the graph store"):
        CachedFeatureStore(fs, 0.1, "degree")
    with pytest.raises(CacheError, match="no feature 'z'"):
        CachedFeatureStore(fs, 0.1, "degree", graph_store=gs, attrs=["z"])


def test_stores_of_two_graphs_are_refused(served_cora):
    fs2, _ = served_cora.get(2)
    _, gs3 = served_cora.get(3)
    with pytest.raises(CacheError, match="different graphs"):
        CachedFeatureStore(fs2, 0.1, "degree", graph_store=gs3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_pinned_rows_need_cuda(cora2):
    fs, gs = cora2
    with pytest.raises(CacheError, match="needs CUDA"):
        CachedFeatureStore(fs, 0.1, "degree", graph_store=gs, pin_memory=True)


def test_the_cache_is_read_only(cora2):
    fs, gs = cora2
    cached = CachedFeatureStore(fs, 0.1, "degree", graph_store=gs, attrs=["y"])
    from pyg_dist.errors import StoreError

    with pytest.raises(StoreError, match="read-only"):
        cached.put_tensor(torch.zeros(2708), group_name=None, attr_name="y", index=None)
    assert torch.equal(cached.get_tensor(None, "y", torch.arange(5)),
                       fs.get_tensor(None, "y", torch.arange(5)))


def test_link_batches_with_the_cache_equal_batches_without(cora2):
    from pyg_dist.loader.dist_link_neighbor_loader import DistLinkNeighborLoader

    fs, gs = cora2
    cached = CachedFeatureStore(fs, 0.3, "degree", graph_store=gs)
    links = torch.tensor([[0, 5, 9, 100, 2000, 633], [633, 6, 1, 101, 7, 0]])

    def batches(store) -> list:
        torch.manual_seed(5)
        return list(DistLinkNeighborLoader((store, gs), num_neighbors=FANOUT,
                                           edge_label_index=links, neg_sampling="binary",
                                           batch_size=3, seed=2, prefetch=2))

    plain, with_cache = batches(fs), batches(cached)
    assert len(plain) == len(with_cache) == 2
    for a, b in zip(plain, with_cache):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_label_index, b.edge_label_index)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert cached.cache_stats()["hits"] > 0


@pytest.mark.parametrize("capacity", [1.0, 0.8])
@pytest.mark.parametrize("prefetch", [0, 4])
def test_mostly_hits_give_the_uncached_batches(cora2, capacity, prefetch):
    # Mostly hits: every id's row is gathered straight into the output, and
    # the misses' fetched rows overwrite theirs.
    fs, gs = cora2
    cached = CachedFeatureStore(fs, capacity, lambda context, budget: torch.arange(budget),
                                whole_attrs=["y"])
    plain = epoch((fs, gs), prefetch)
    before = served_get_bytes(fs)
    with_cache = epoch((cached, gs), prefetch)
    for a, b in zip(plain, with_cache):
        for name in ("x", "y", "train_mask"):
            assert a[name].dtype == b[name].dtype
            assert torch.equal(a[name], b[name]), name
    stats = cached.cache_stats()
    assert stats["hits"] + stats["misses"] == sum(b.num_nodes for b in with_cache)
    assert stats["hits"] > 2 * stats["misses"]
    if capacity == 1.0:  # every feature cached: no row asked for
        assert stats["misses"] == 0 and served_get_bytes(fs) == before
    else:
        assert stats["misses"] > 0
