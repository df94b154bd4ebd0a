"""The cache's promise in bytes: on a power-law graph of 100k nodes in 4 parts,
a 20% cache halves what the servers send per epoch (counted by the servers)."""

from __future__ import annotations

import pytest
import torch
from support.servers import serve_parts

from pyg_dist.datasets import power_law
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.cached_feature_store import CachedFeatureStore
from pyg_dist.store.connect import connect

NUM_NODES = 100_000
FANOUT = [10, 5]

pytestmark = pytest.mark.slow


def served_get_bytes(fs) -> int:
    return sum(fs.router.client.call(part, "stats", {}, timeout=10.0).result["get_bytes"]
               for part in range(fs.router.num_parts))


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    data = power_law(NUM_NODES, 300_000, 64, seed=0)
    root = str(tmp_path_factory.mktemp("skewed") / "parts")
    partition(data, 4, root, "random")
    with serve_parts(root) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            yield fs, gs
        finally:
            fs.close()


@pytest.mark.parametrize("policy", ["degree", "frequency"])
def test_a_fifth_of_the_nodes_cached_halves_the_bytes_sent(skewed, policy):
    fs, gs = skewed
    seeds = torch.randperm(NUM_NODES, generator=torch.Generator().manual_seed(1))[:4096]
    options = {"num_neighbors": FANOUT, "input_nodes": seeds} if policy == "frequency" else {}
    cached = CachedFeatureStore(fs, 0.2, policy, graph_store=gs, policy_options=options)

    def epoch_bytes(store) -> int:
        before = served_get_bytes(fs)
        loader = DistNeighborLoader((store, gs), num_neighbors=FANOUT, input_nodes=seeds,
                                    batch_size=512, shuffle=True, seed=3)
        for _ in loader:
            pass
        return served_get_bytes(fs) - before

    plain, with_cache = epoch_bytes(fs), epoch_bytes(cached)
    stats = cached.cache_stats()
    print(f"\n{policy}: {plain / 2**20:.1f} MiB -> {with_cache / 2**20:.1f} MiB per epoch "
          f"({with_cache / plain:.2f}x), hit rate {stats['hit_rate']:.2f}, "
          f"start-up {stats['report']}")
    assert with_cache == stats["bytes_fetched"]
    assert with_cache <= 0.5 * plain
