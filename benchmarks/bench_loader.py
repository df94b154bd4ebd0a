"""DistNeighborLoader versus PyG's NeighborLoader: seeds/s and sampled edges/s.

    .venv/bin/python benchmarks/bench_loader.py            # ~100k nodes, ~2M edges
    .venv/bin/python benchmarks/bench_loader.py --num-nodes 20000 --batches 10

Builds a FakeDataset-style graph (``pyg_dist.datasets.fake``), partitions it
into ``--parts`` parts (METIS), serves every part from its own
``pyg-dist serve`` process on loopback, and times full batches (sampling plus
features and labels) of:

* PyG's ``NeighborLoader`` on the unpartitioned graph, in this process;
* ``DistNeighborLoader`` over the servers, synchronous (``prefetch=0``) and
  with ``--prefetch`` batches in flight (hop by hop, or with
  ``--server-hops`` the servers sampling among themselves; with
  ``--colocate`` the trainer serving the parts in its own process,
  ``pyg_dist.connect(colocate=True)``);

with the same seed nodes, fan-out and batch size, in the same run. Prints one
line per loader and the ratios. Figures, not assertions: nothing here fails
on a slow machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import torch


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=100_000)
    p.add_argument("--avg-degree", type=float, default=10.0,
                   help="edges drawn per node before symmetrising (10 gives ~2M edges "
                        "for 100k nodes)")
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--partitioner", default="metis")
    p.add_argument("--fanout", type=int, nargs="+", default=[15, 10])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=30, help="timed batches per loader")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches per loader")
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--server-hops", action="store_true",
                   help="the servers sample a batch's hops among themselves (sample_tree); "
                        "by default every hop goes back to the trainer")
    p.add_argument("--colocate", action="store_true",
                   help="serve the parts in the trainer's process (connect(colocate=True))")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def time_loader(loader: Any, warmup: int, batches: int) -> tuple[float, int, int]:
    """Seconds, seeds and sampled edges of ``batches`` batches after ``warmup``."""
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    seeds = edges = 0
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(it)
        seeds += int(batch.batch_size)
        edges += int(batch.edge_index.size(1))
    seconds = time.perf_counter() - start
    del it  # stops a prefetch pipeline's threads
    return seconds, seeds, edges


def report(name: str, seconds: float, seeds: int, edges: int) -> float:
    rate = seeds / seconds
    print(f"{name:<34} {rate:>10,.0f} seeds/s {edges / seconds:>14,.0f} edges/s "
          f"({seeds} seeds, {edges} edges, {seconds:.2f}s)", flush=True)
    return rate


def main() -> None:
    args = parse_args()
    from torch_geometric.loader import NeighborLoader

    from pyg_dist.cluster import LocalCluster
    from pyg_dist.datasets import fake
    from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
    from pyg_dist.partitioning.writer import partition
    from pyg_dist.store.connect import connect

    data = fake(num_nodes=args.num_nodes, avg_degree=args.avg_degree,
                num_channels=args.channels, seed=args.seed)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges, x {tuple(data.x.shape)}; "
          f"fan-out {args.fanout}, batch {args.batch_size}, {args.parts} parts on loopback, "
          f"torch threads {torch.get_num_threads()}", flush=True)
    total = args.batch_size * (args.batches + args.warmup)
    gen = torch.Generator().manual_seed(args.seed)
    seeds = torch.randperm(data.num_nodes, generator=gen)[:total]
    kwargs = dict(num_neighbors=args.fanout, input_nodes=seeds, batch_size=args.batch_size)

    rates = {"pyg": report("PyG NeighborLoader (1 process)",
                           *time_loader(NeighborLoader(data, **kwargs), args.warmup,
                                        args.batches))}
    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-loader-") as tmp:
        start = time.perf_counter()
        partition(data, args.parts, f"{tmp}/parts", partitioner=args.partitioner)
        print(f"partitioned in {time.perf_counter() - start:.1f}s", flush=True)
        with LocalCluster(f"{tmp}/parts", forwarding=args.server_hops) as cluster:
            fs, gs = connect(cluster.endpoints, colocate=args.colocate)
            try:
                for k in sorted({0, args.prefetch}):
                    loader = DistNeighborLoader((fs, gs), prefetch=k, seed=args.seed,
                                                server_hops=args.server_hops and None,
                                                **kwargs)
                    rates[k] = report(f"DistNeighborLoader prefetch={k}",
                                      *time_loader(loader, args.warmup, args.batches))
            finally:
                fs.close()
    for k in sorted({0, args.prefetch}):
        print(f"ratio DistNeighborLoader prefetch={k} / PyG NeighborLoader: "
              f"{rates[k] / rates['pyg']:.2f}x (seeds/s)")


if __name__ == "__main__":
    main()
