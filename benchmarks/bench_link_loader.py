"""DistLinkNeighborLoader versus PyG's LinkNeighborLoader: labelled edges/s.

    .venv/bin/python benchmarks/bench_link_loader.py          # ~100k nodes, ~2M edges
    .venv/bin/python benchmarks/bench_link_loader.py --num-nodes 20000 --batches 10

Builds a FakeDataset-style graph (``pyg_dist.datasets.fake``), partitions it
into ``--parts`` parts (METIS), serves every part from its own
``pyg-dist serve`` process on loopback, and times full link batches (binary
negatives at ``--ratio``, sampling around both endpoints, features and
labels) of:

* PyG's ``LinkNeighborLoader`` on the unpartitioned graph, in this process;
* ``DistLinkNeighborLoader`` over the servers, synchronous (``prefetch=0``)
  and with ``--prefetch`` batches in flight;

with the same seed links, fan-out, batch size and ratio, in the same run.
A labelled edge is a positive or a negative link of a batch
(``edge_label.numel()``). Prints one line per loader and the ratios. Figures,
not assertions: nothing here fails on a slow machine.
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
    p.add_argument("--batch-size", type=int, default=512, help="positive links per batch")
    p.add_argument("--ratio", type=float, default=1.0, help="binary negatives per positive")
    p.add_argument("--batches", type=int, default=20, help="timed batches per loader")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches per loader")
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def time_loader(loader: Any, warmup: int, batches: int) -> tuple[float, int, int]:
    """Seconds, labelled edges and sampled edges of the first ``batches`` batches.

    ``warmup`` batches are taken from a first iterator (connections, caches,
    thread pools); the clock then runs from the creation of a second one, so
    that a prefetch pipeline's batches made before the first timed one are
    paid for.
    """
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    del it  # stops a prefetch pipeline's threads
    labelled = edges = 0
    start = time.perf_counter()
    it = iter(loader)
    for _ in range(batches):
        batch = next(it)
        labelled += int(batch.edge_label.numel())
        edges += int(batch.edge_index.size(1))
    seconds = time.perf_counter() - start
    del it
    return seconds, labelled, edges


def report(name: str, seconds: float, labelled: int, edges: int) -> float:
    rate = labelled / seconds
    print(f"{name:<38} {rate:>10,.0f} labelled edges/s {edges / seconds:>14,.0f} sampled "
          f"edges/s ({labelled} labelled, {edges} sampled, {seconds:.2f}s)", flush=True)
    return rate


def main() -> None:
    args = parse_args()
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.sampler import NegativeSampling

    from pyg_dist.cluster import LocalCluster
    from pyg_dist.datasets import fake
    from pyg_dist.loader.dist_link_neighbor_loader import DistLinkNeighborLoader
    from pyg_dist.partitioning.writer import partition
    from pyg_dist.store.connect import connect

    data = fake(num_nodes=args.num_nodes, avg_degree=args.avg_degree,
                num_channels=args.channels, seed=args.seed)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges, x {tuple(data.x.shape)}; "
          f"fan-out {args.fanout}, {args.batch_size} links per batch, binary negatives x"
          f"{args.ratio}, {args.parts} parts on loopback, torch threads "
          f"{torch.get_num_threads()}", flush=True)
    total = args.batch_size * max(args.batches, args.warmup)
    gen = torch.Generator().manual_seed(args.seed)
    links = data.edge_index[:, torch.randperm(data.num_edges, generator=gen)[:total]]
    kwargs = dict(num_neighbors=args.fanout, edge_label_index=links,
                  neg_sampling=NegativeSampling("binary", args.ratio),
                  batch_size=args.batch_size)

    torch.manual_seed(args.seed)
    rates = {"pyg": report("PyG LinkNeighborLoader (1 process)",
                           *time_loader(LinkNeighborLoader(data, **kwargs), args.warmup,
                                        args.batches))}
    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-link-") as tmp:
        start = time.perf_counter()
        partition(data, args.parts, f"{tmp}/parts", partitioner=args.partitioner)
        print(f"partitioned in {time.perf_counter() - start:.1f}s", flush=True)
        with LocalCluster(f"{tmp}/parts") as cluster:
            fs, gs = connect(cluster.endpoints)
            try:
                for k in sorted({0, args.prefetch}):
                    loader = DistLinkNeighborLoader((fs, gs), prefetch=k, seed=args.seed,
                                                    **kwargs)
                    rates[k] = report(f"DistLinkNeighborLoader prefetch={k}",
                                      *time_loader(loader, args.warmup, args.batches))
            finally:
                fs.close()
    for k in sorted({0, args.prefetch}):
        print(f"ratio DistLinkNeighborLoader prefetch={k} / PyG LinkNeighborLoader: "
              f"{rates[k] / rates['pyg']:.2f}x (labelled edges/s)")


if __name__ == "__main__":
    main()
