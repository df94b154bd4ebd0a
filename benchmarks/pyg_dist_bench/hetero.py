"""``pyg-dist bench --hetero``: the heterogeneous loader, measured in one run.

Rows (same fan-out, batch size and number of batches everywhere):

1. ``pyg-local hetero NeighborLoader``: PyG's ``NeighborLoader`` on the
   unpartitioned ``HeteroData`` (a ``FakeHeteroDataset`` graph: 3 node types
   of ``num_nodes / 3`` nodes each, 6 edge types), seeded at node type ``v0``.
2. ``pyg-dist hetero K=0`` / ``K=k``: :class:`DistNeighborLoader` against
   one server process per part on loopback.
3. ``pyg-dist homogeneous K=0`` / ``K=k``: the same loader on a homogeneous
   graph of the same size (as many nodes, about as many edges, the same
   feature width), for the cost of heterogeneity itself.

Ratios: the heterogeneous loader's seeds/s over PyG's, and its cost per
seed and per sampled edge over the homogeneous loader's.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from typing import Any, Optional

import torch

from pyg_dist_bench.bench_config import BenchConfig
from pyg_dist_bench.timing import Row, time_loader

_NODE_TYPES = 3


def run_hetero_bench(cfg: BenchConfig, workdir: Optional[str] = None) -> dict[str, Any]:
    """Runs the heterogeneous rows.

    Args:
        cfg: What to measure (``num_nodes`` over all node types).
        workdir: Where the temporary partitions go; removed afterwards.

    Returns:
        ``config``, ``rows`` and ``ratios``, as :func:`~pyg_dist_bench.runner.run_bench`.
    """
    from torch_geometric.loader import NeighborLoader

    from pyg_dist.datasets import fake, fake_hetero

    hetero = fake_hetero(num_nodes=max(1, cfg.num_nodes // _NODE_TYPES),
                         avg_degree=cfg.avg_degree, num_channels=cfg.num_features,
                         num_classes=cfg.num_classes, num_node_types=_NODE_TYPES,
                         seed=cfg.seed)
    num_nodes = sum(hetero[t].num_nodes for t in hetero.node_types)
    num_edges = sum(hetero[t].edge_index.size(1) for t in hetero.edge_types)
    homo = fake(num_nodes=num_nodes, avg_degree=num_edges / num_nodes / 2,
                num_channels=cfg.num_features, num_classes=cfg.num_classes, seed=cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    total = cfg.batch_size * cfg.num_batches
    hetero_seeds = torch.randperm(hetero["v0"].num_nodes, generator=gen)[:total]
    homo_seeds = torch.randperm(homo.num_nodes, generator=gen)[:total]
    note = (f"{num_nodes} nodes ({_NODE_TYPES} types), {num_edges} edges "
            f"({len(hetero.edge_types)} types)")
    rows = [time_loader("pyg-local hetero NeighborLoader", NeighborLoader(
        hetero, num_neighbors=cfg.num_neighbors, input_nodes=("v0", hetero_seeds),
        batch_size=cfg.batch_size), cfg.num_batches, note=note)]
    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-hetero-", dir=workdir) as tmp:
        rows += _served_rows(cfg, hetero, f"{tmp}/hetero", "hetero", ("v0", hetero_seeds))
        rows += _served_rows(cfg, homo, f"{tmp}/homo", "homogeneous", homo_seeds)
    return {"config": {**asdict(cfg), "hetero": True}, "rows": [r.as_dict() for r in rows],
            "ratios": _ratios(rows, cfg.prefetch)}


def _served_rows(cfg: BenchConfig, data: Any, root: str, tag: str,
                 input_nodes: Any) -> list[Row]:
    """Partitions and serves ``data``; the loader rows, prefetch 0 and k."""
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
    from pyg_dist.partitioning.writer import partition
    from pyg_dist.store.connect import connect

    partition(data, cfg.num_parts, root, partitioner=cfg.partitioner, progress=False)
    rows = []
    with LocalCluster(root, forwarding=True) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            for server_hops in (False, True):
                for k in (0, cfg.prefetch):
                    loader = DistNeighborLoader((fs, gs), num_neighbors=cfg.num_neighbors,
                                                input_nodes=input_nodes,
                                                batch_size=cfg.batch_size, prefetch=k,
                                                seed=cfg.seed, server_hops=server_hops)
                    next(iter(loader))  # warm-up: connections, threads, heap
                    name = f"pyg-dist {tag} K={k}" + (" server hops" if server_hops else "")
                    rows.append(time_loader(name, loader, cfg.num_batches))
        finally:
            fs.close()
    return rows


def _ratios(rows: list[Row], k: int) -> dict[str, float]:
    by = {r.name: r for r in rows}
    out = {}
    pyg = by["pyg-local hetero NeighborLoader"]
    for prefetch in sorted({0, k}):
        het, hom = by[f"pyg-dist hetero K={prefetch}"], by[f"pyg-dist homogeneous K={prefetch}"]
        if pyg.seeds_per_s:
            out[f"pyg-dist hetero K={prefetch} / pyg-local hetero (seeds/s)"] = \
                het.seeds_per_s / pyg.seeds_per_s
        if het.seeds_per_s and het.edges_per_s:
            out[f"hetero / homogeneous cost per seed K={prefetch}"] = \
                hom.seeds_per_s / het.seeds_per_s
            out[f"hetero / homogeneous cost per sampled edge K={prefetch}"] = \
                hom.edges_per_s / het.edges_per_s
        tree = by.get(f"pyg-dist hetero K={prefetch} server hops")
        if tree is not None and het.seeds_per_s:
            out[f"hetero K={prefetch} server hops / hop by hop (seeds/s)"] = \
                tree.seeds_per_s / het.seeds_per_s
    return out
