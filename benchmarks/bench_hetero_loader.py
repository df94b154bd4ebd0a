"""Heterogeneous DistNeighborLoader versus PyG's NeighborLoader on the same
HeteroData, and versus the homogeneous DistNeighborLoader on a graph of the
same size: seeds/s and sampled edges/s.

    .venv/bin/python benchmarks/bench_hetero_loader.py     # ~106k nodes, ~2.1M edges
    .venv/bin/python benchmarks/bench_hetero_loader.py --nodes-per-type 5000 --batches 5

Builds a ``FakeHeteroDataset`` graph (``pyg_dist.datasets.fake_hetero``: 3
node types, 6 edge types), partitions it (METIS) and serves every part from
its own ``pyg-dist serve`` process on loopback, then times full batches
(sampling plus every node type's features) seeded at node type ``v0`` of:

* PyG's ``NeighborLoader`` on the unpartitioned ``HeteroData`` (torch-sparse);
* ``DistNeighborLoader`` over the servers, ``prefetch=0`` and ``--prefetch``;
* the same two over a homogeneous ``FakeDataset`` graph with as many nodes,
  about as many edges and the same feature width.

Same fan-out and batch size everywhere, in the same run. Prints one line per
loader and the ratios: heterogeneous against PyG (seeds/s) and the
heterogeneous loader's cost per seed and per sampled edge against the
homogeneous one's. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import torch


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes-per-type", type=int, default=33_500,
                   help="average nodes per node type (33,500 gives ~106k nodes)")
    p.add_argument("--avg-degree", type=float, default=10.0,
                   help="average edges per source node and edge type")
    p.add_argument("--channels", type=int, default=64, help="average feature width")
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--partitioner", default="metis")
    p.add_argument("--fanout", type=int, nargs="+", default=[15, 10])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=20, help="timed batches per loader")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches per loader")
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def batch_counts(batch: Any) -> tuple[int, int]:
    """Seeds and sampled edges of a ``Data`` or ``HeteroData`` batch."""
    if hasattr(batch, "edge_index_dict"):
        seeds = next(int(s.batch_size) for s in batch.node_stores if "batch_size" in s)
        return seeds, sum(int(e.size(1)) for e in batch.edge_index_dict.values())
    return int(batch.batch_size), int(batch.edge_index.size(1))


def time_loader(loader: Any, warmup: int, batches: int) -> tuple[float, int, int]:
    """Seconds, seeds and sampled edges of ``batches`` batches after ``warmup``."""
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    seeds = edges = 0
    start = time.perf_counter()
    for _ in range(batches):
        s, e = batch_counts(next(it))
        seeds += s
        edges += e
    seconds = time.perf_counter() - start
    del it  # stops a prefetch pipeline's threads
    return seconds, seeds, edges


def report(name: str, seconds: float, seeds: int, edges: int) -> tuple[float, float]:
    print(f"{name:<40} {seeds / seconds:>10,.0f} seeds/s {edges / seconds:>14,.0f} edges/s "
          f"({seeds} seeds, {edges} edges, {seconds:.2f}s)", flush=True)
    return seeds / seconds, edges / seconds


def served_rates(data: Any, tmp: str, name: str, args: argparse.Namespace, seeds: Any,
                 input_nodes: Any) -> dict[int, tuple[float, float]]:
    """Partitions and serves ``data``; times DistNeighborLoader on it."""
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
    from pyg_dist.partitioning.writer import partition
    from pyg_dist.store.connect import connect

    start = time.perf_counter()
    partition(data, args.parts, f"{tmp}/{name}", partitioner=args.partitioner)
    print(f"{name}: partitioned in {time.perf_counter() - start:.1f}s", flush=True)
    rates = {}
    with LocalCluster(f"{tmp}/{name}") as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            for k in sorted({0, args.prefetch}):
                loader = DistNeighborLoader((fs, gs), num_neighbors=args.fanout,
                                            input_nodes=input_nodes, batch_size=args.batch_size,
                                            prefetch=k, seed=args.seed)
                rates[k] = report(f"{name} DistNeighborLoader prefetch={k}",
                                  *time_loader(loader, args.warmup, args.batches))
        finally:
            fs.close()
    return rates


def main() -> None:
    args = parse_args()
    from torch_geometric.loader import NeighborLoader

    from pyg_dist.datasets import fake, fake_hetero

    hetero = fake_hetero(num_nodes=args.nodes_per_type, avg_degree=args.avg_degree,
                         num_channels=args.channels, seed=args.seed)
    num_nodes = sum(hetero[t].num_nodes for t in hetero.node_types)
    num_edges = sum(hetero[t].edge_index.size(1) for t in hetero.edge_types)
    homo = fake(num_nodes=num_nodes, avg_degree=num_edges / num_nodes / 2,
                num_channels=args.channels, seed=args.seed)
    print(f"hetero: {num_nodes:,} nodes ({len(hetero.node_types)} types), {num_edges:,} edges "
          f"({len(hetero.edge_types)} types); homogeneous: {homo.num_nodes:,} nodes, "
          f"{homo.num_edges:,} edges; fan-out {args.fanout}, batch {args.batch_size}, "
          f"{args.parts} parts on loopback, torch threads {torch.get_num_threads()}",
          flush=True)
    total = args.batch_size * (args.batches + args.warmup)
    gen = torch.Generator().manual_seed(args.seed)
    hetero_seeds = torch.randperm(hetero["v0"].num_nodes, generator=gen)[:total]
    homo_seeds = torch.randperm(homo.num_nodes, generator=gen)[:total]
    if hetero_seeds.numel() < total:
        raise SystemExit(f"v0 has {hetero_seeds.numel()} nodes, fewer than the {total} seeds "
                         f"asked for; lower --batches or --batch-size")

    pyg = report("hetero PyG NeighborLoader (1 process)", *time_loader(
        NeighborLoader(hetero, num_neighbors=args.fanout, input_nodes=("v0", hetero_seeds),
                       batch_size=args.batch_size), args.warmup, args.batches))
    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-hetero-") as tmp:
        het = served_rates(hetero, tmp, "hetero", args, hetero_seeds, ("v0", hetero_seeds))
        hom = served_rates(homo, tmp, "homogeneous", args, homo_seeds, homo_seeds)
    for k in sorted(het):
        print(f"prefetch={k}: hetero / PyG {het[k][0] / pyg[0]:.2f}x seeds/s; hetero cost "
              f"per seed {hom[k][0] / het[k][0]:.2f}x, per sampled edge "
              f"{hom[k][1] / het[k][1]:.2f}x the homogeneous loader's", flush=True)


if __name__ == "__main__":
    main()
