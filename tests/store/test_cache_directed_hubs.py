"""The ``degree`` policy ranks by what predicts sampling: on a directed graph
whose in-hubs and out-hubs differ, caching by out-degree (PyG's direction: a
node is drawn as a neighbour once per edge leaving it) saves bytes, caching
by in-degree hardly any. Bytes counted by the servers."""

from __future__ import annotations

import pytest
import torch
from support.servers import serve_parts
from torch_geometric.data import Data

from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.cache_policy import top_by_score
from pyg_dist.store.cached_feature_store import CachedFeatureStore
from pyg_dist.store.connect import connect

NUM_NODES = 20_000
NUM_EDGES = 100_000
FANOUT = [10, 5]


def directed_hubs(seed: int = 0) -> Data:
    """Sources and destinations both power-law, but ranked by two different
    permutations: the nodes most edges leave are not those most edges enter."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.arange(1, NUM_NODES + 1, dtype=torch.float64).pow(-1.0)
    out_rank, in_rank = torch.randperm(NUM_NODES, generator=gen), \
        torch.randperm(NUM_NODES, generator=gen)
    src = out_rank[torch.multinomial(weight, NUM_EDGES, replacement=True, generator=gen)]
    dst = in_rank[torch.multinomial(weight, NUM_EDGES, replacement=True, generator=gen)]
    keep = src != dst
    return Data(x=torch.randn(NUM_NODES, 32, generator=gen), num_nodes=NUM_NODES,
                edge_index=torch.stack([src[keep], dst[keep]]))


def in_degree_policy(context, budget):
    """The ranking ``degree`` used before: in-degree."""
    return top_by_score(context.graph_store.in_degree(), budget)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = directed_hubs()
    root = str(tmp_path_factory.mktemp("hubs") / "parts")
    partition(data, 4, root, "random")
    with serve_parts(root) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            yield data, fs, gs
        finally:
            fs.close()


def served_get_bytes(fs) -> int:
    return sum(fs.router.client.call(part, "stats", {}, timeout=10.0).result["get_bytes"]
               for part in range(fs.router.num_parts))


def test_out_degrees_add_up_over_the_parts(served):
    data, _, gs = served
    assert torch.equal(gs.out_degree(), torch.bincount(data.edge_index[0],
                                                       minlength=NUM_NODES))


def test_degree_policy_caches_the_out_hubs_and_moves_fewer_bytes(served):
    data, fs, gs = served
    seeds = torch.randperm(NUM_NODES, generator=torch.Generator().manual_seed(1))[:1024]

    def epoch_bytes(store) -> int:
        before = served_get_bytes(fs)
        loader = DistNeighborLoader((store, gs), num_neighbors=FANOUT, input_nodes=seeds,
                                    batch_size=512, shuffle=True, seed=3)
        for _ in loader:
            pass
        return served_get_bytes(fs) - before

    by_out = CachedFeatureStore(fs, 0.2, "degree", graph_store=gs)
    by_in = CachedFeatureStore(fs, 0.2, in_degree_policy, graph_store=gs)
    out_degree = torch.bincount(data.edge_index[0], minlength=NUM_NODES)
    cached = by_out.cache_stats()["report"]["cached_nodes"]
    assert cached == int(0.2 * NUM_NODES)
    plain, out_bytes, in_bytes = epoch_bytes(fs), epoch_bytes(by_out), epoch_bytes(by_in)
    print(f"\nuncached {plain / 2**20:.2f} MiB, out-degree {out_bytes / plain:.2f}x, "
          f"in-degree {in_bytes / plain:.2f}x")
    assert out_bytes < 0.75 * in_bytes
    assert out_bytes < 0.6 * plain
    # The top of the ranking is the out-hubs themselves.
    top = torch.sort(out_degree, descending=True, stable=True).indices[:10]
    assert bool((by_out._types[None].slot[top] >= 0).all())
