"""CachedFeatureStore on a heterogeneous graph served by real servers: node
and link batches with the cache equal those without it for every policy
(prefetch 0 and 4), hits and misses are counted per node type, capacities
are shared out across types as documented, and bad input is a CacheError."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.errors import CacheError
from pyg_dist.loader import DistLinkNeighborLoader, DistNeighborLoader
from pyg_dist.store import cache_layout
from pyg_dist.store.cached_feature_store import CachedFeatureStore

FANOUT = [5, 3]
TYPES = ["v0", "v1", "v2"]


@pytest.fixture(scope="module")
def hetero2(served_hetero):
    return served_hetero.get(2)


def seeds(hetero_data) -> torch.Tensor:
    return torch.arange(0, hetero_data["v0"].num_nodes, 3)


def policies(hetero_data) -> list[tuple[str, dict]]:
    return [("degree", {}), ("halo", {"part": 0}),
            ("frequency", {"num_neighbors": FANOUT, "input_nodes": ("v0", seeds(hetero_data)),
                           "batch_size": 32})]


def node_epoch(stores, input_nodes, prefetch: int) -> list:
    torch.manual_seed(5)  # the DataLoader shuffles with the global generator
    return list(DistNeighborLoader(stores, num_neighbors=FANOUT, input_nodes=input_nodes,
                                   batch_size=32, shuffle=True, seed=11, prefetch=prefetch))


def link_epoch(stores, edge_type, prefetch: int) -> list:
    torch.manual_seed(5)
    return list(DistLinkNeighborLoader(stores, num_neighbors=FANOUT,
                                       edge_label_index=(edge_type, None),
                                       neg_sampling="binary", batch_size=256, shuffle=True,
                                       seed=3, prefetch=prefetch))


def assert_equal_batches(plain: list, with_cache: list) -> None:
    assert len(plain) == len(with_cache) > 0
    for a, b in zip(plain, with_cache):
        assert a.node_types == b.node_types and a.edge_types == b.edge_types
        for store_a, store_b in zip(a.stores, b.stores):
            assert sorted(store_a.keys()) == sorted(store_b.keys())
            for name, value in store_a.items():
                if isinstance(value, torch.Tensor):
                    assert value.dtype == store_b[name].dtype, name
                    assert torch.equal(value, store_b[name]), name
                else:
                    assert value == store_b[name], name


def looked_up(batches: list) -> dict[str, int]:
    """Rows of each node type that the batches' features were read for."""
    return {t: sum(batch[t].num_nodes for batch in batches if t in batch.node_types)
            for t in TYPES}


@pytest.mark.parametrize("prefetch", [0, 4])
@pytest.mark.parametrize("policy", ["degree", "halo", "frequency"])
def test_node_batches_with_the_cache_equal_batches_without(hetero_data, hetero2, policy,
                                                           prefetch):
    fs, gs = hetero2
    options = dict(policies(hetero_data))[policy]
    cached = CachedFeatureStore(fs, 0.3, policy, graph_store=gs, whole_attrs=["train_mask"],
                                policy_options=options)
    input_nodes = ("v0", seeds(hetero_data))
    with_cache = node_epoch((cached, gs), input_nodes, prefetch)
    assert_equal_batches(node_epoch((fs, gs), input_nodes, prefetch), with_cache)
    stats = cached.cache_stats()
    lookups = looked_up(with_cache)
    for t in TYPES:
        per_type = stats["types"][t]
        assert per_type["hits"] > 0 and per_type["misses"] > 0, t
        # Every row of every type read in a batch is a hit or a miss of its type.
        assert per_type["hits"] + per_type["misses"] == lookups[t], t
        assert per_type["bytes_saved"] == per_type["hits"] * cached.row_bytes[t]
        assert 0 < stats["report"]["types"][t]["cached_nodes"] <= \
            int(0.3 * hetero_data[t].num_nodes)
    for key in ("hits", "misses", "bytes_fetched", "bytes_saved"):
        assert stats[key] == sum(stats["types"][t][key] for t in TYPES)
    assert stats["hit_rate"] == stats["hits"] / (stats["hits"] + stats["misses"])


@pytest.mark.parametrize("prefetch", [0, 4])
@pytest.mark.parametrize("policy", ["degree", "halo", "frequency"])
def test_link_batches_with_the_cache_equal_batches_without(hetero_data, hetero2, policy,
                                                           prefetch):
    fs, gs = hetero2
    edge_type = ("v0", "e0", "v2")
    options = dict(policies(hetero_data))[policy]
    cached = CachedFeatureStore(fs, 0.3, policy, graph_store=gs, policy_options=options)
    with_cache = link_epoch((cached, gs), edge_type, prefetch)
    assert_equal_batches(link_epoch((fs, gs), edge_type, prefetch), with_cache)
    stats = cached.cache_stats()
    assert all(stats["types"][t]["hits"] > 0 for t in TYPES)
    assert stats["hits"] + stats["misses"] == sum(looked_up(with_cache).values())


def test_policies_choose_per_node_type(hetero_data, hetero2):
    fs, gs = hetero2
    cached = CachedFeatureStore(fs, 1.0, "degree", graph_store=gs, attrs=["x"])
    for t in TYPES:
        degree = torch.zeros(hetero_data[t].num_nodes, dtype=torch.long)
        for edge_type in hetero_data.edge_types:
            if edge_type[0] == t:  # out-degree: edges leaving the node
                degree += torch.bincount(hetero_data[edge_type].edge_index[0],
                                         minlength=degree.numel())
        chosen = set((cached._types[t].slot >= 0).nonzero().view(-1).tolist())
        assert chosen == set((degree > 0).nonzero().view(-1).tolist()), t
    halo = CachedFeatureStore(fs, 1.0, "halo", graph_store=gs, attrs=["x"],
                              policy_options={"part": 1})
    for t in TYPES:
        book = gs.router.book_of(t)
        expected = set()
        for src_t, rel, dst_t in hetero_data.edge_types:
            if src_t == t:
                src, dst = hetero_data[src_t, rel, dst_t].edge_index
                owner = gs.router.book_of(dst_t).part_of(dst)
                expected |= set(src[(owner == 1) & (book.part_of(src) != 1)].tolist())
        assert set((halo._types[t].slot >= 0).nonzero().view(-1).tolist()) == expected, t


def test_a_fraction_applies_to_every_type_and_bytes_are_split_by_row_bytes(hetero_data,
                                                                           hetero2):
    fs, gs = hetero2
    nodes = {t: hetero_data[t].num_nodes for t in TYPES}
    by_fraction = CachedFeatureStore(fs, 0.25, lambda context, budget: torch.arange(budget))
    for t in TYPES:
        assert by_fraction.report["types"][t]["cached_nodes"] == int(0.25 * nodes[t])
    row_bytes = by_fraction.row_bytes
    total = sum(nodes[t] * row_bytes[t] for t in TYPES)
    capacity = total // 5
    by_bytes = CachedFeatureStore(fs, capacity, lambda context, budget: torch.arange(budget))
    report = by_bytes.report["types"]
    for t in TYPES:
        # Each type's share is proportional to the bytes of all its rows:
        # the same fraction of every type's nodes.
        assert report[t]["cached_nodes"] == capacity * nodes[t] // total
    assert by_bytes.report["cached_bytes"] <= capacity
    per_type = CachedFeatureStore(fs, {"v1": 0.5, "v2": 100},
                                  lambda context, budget: torch.arange(budget))
    assert [per_type.report["types"][t]["cached_nodes"] for t in TYPES] == \
        [0, int(0.5 * nodes["v1"]), 100 // row_bytes["v2"]]


def test_attrs_per_type_and_whole_attrs_where_served(hetero_data, hetero2):
    fs, gs = hetero2
    cached = CachedFeatureStore(fs, 0.5, "degree", graph_store=gs,
                                attrs={"v1": ["x"]}, whole_attrs=["y", "train_mask"])
    assert cached.attrs == {"v0": [], "v1": ["x"], "v2": []}
    assert cached.whole_attrs == {"v0": ["y", "train_mask"], "v1": [], "v2": []}
    ids = torch.tensor([3, 1, 2, 3])
    for t, name in [("v0", "y"), ("v0", "x"), ("v1", "x"), ("v2", "x")]:
        assert torch.equal(cached.get_tensor(t, name, ids), hetero_data[t][name][ids])
    assert torch.equal(cached.get_tensor("v0", "train_mask", None),
                       hetero_data["v0"].train_mask)


def test_bad_input_is_refused(hetero2):
    fs, gs = hetero2
    with pytest.raises(CacheError, match="attrs names node types.*'v9'"):
        CachedFeatureStore(fs, 0.1, "degree", graph_store=gs, attrs={"v9": ["x"]})
    with pytest.raises(CacheError, match="no feature 'y' of node type 'v1'"):
        CachedFeatureStore(fs, 0.1, "degree", graph_store=gs, whole_attrs={"v1": ["y"]})
    with pytest.raises(CacheError, match="no feature 'z' on the servers"):
        CachedFeatureStore(fs, 0.1, "degree", graph_store=gs, attrs=["z"])
    with pytest.raises(CacheError, match="capacity names node types.*'v7'"):
        CachedFeatureStore(fs, {"v7": 0.5}, "degree", graph_store=gs)
    with pytest.raises(CacheError, match=r"\(0, 1\]"):
        CachedFeatureStore(fs, {"v0": 1.5}, "degree", graph_store=gs)
    with pytest.raises(CacheError, match="needs the seeds' node type"):
        CachedFeatureStore(fs, 0.1, "frequency", graph_store=gs,
                           policy_options={"num_neighbors": FANOUT})
    with pytest.raises(CacheError, match="input_nodes names node type 'v5'"):
        CachedFeatureStore(fs, 0.1, "frequency", graph_store=gs,
                           policy_options={"num_neighbors": FANOUT, "input_nodes": ("v5", None)})


def test_a_capacity_over_the_memory_available_is_refused(hetero2, monkeypatch):
    fs, gs = hetero2
    # 30 kB available: every type's rows at capacity 1.0 plus the slot
    # tables need ~43 kB (each type alone less), 5% of them ~11 kB.
    monkeypatch.setattr(cache_layout, "available_memory", lambda: 30_000)
    with pytest.raises(CacheError, match=r"v0: \d+ nodes x \d+ bytes, v1: .*lower capacity"):
        CachedFeatureStore(fs, 1.0, "degree", graph_store=gs)
    CachedFeatureStore(fs, 0.05, "degree", graph_store=gs)


def test_a_policy_answer_out_of_range_names_its_node_type(hetero_data, hetero2):
    fs, gs = hetero2

    def too_far(context, budget):
        return torch.tensor([context.num_nodes])  # one past the type's last node

    with pytest.raises(CacheError, match=r"for node type 'v0'.*outside"):
        CachedFeatureStore(fs, 0.1, too_far, graph_store=gs)
