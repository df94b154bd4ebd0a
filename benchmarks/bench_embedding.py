"""Training with a DistEmbedding versus served fixed features of the same size: seeds/s.

    .venv/bin/python benchmarks/bench_embedding.py                 # ~50k nodes, dim 64
    .venv/bin/python benchmarks/bench_embedding.py --num-nodes 20000 --batches 10

Builds a FakeDataset-style graph (``pyg_dist.datasets.fake``) twice: once
with a fixed float32 ``x`` of ``--dim`` columns per node, once without ``x``.
Each is partitioned into ``--parts`` parts and served by ``pyg-dist serve``
processes on loopback. The same training step (a two-layer GraphSAGE, dense
Adam) runs over ``DistNeighborLoader`` batches with the same seeds, fan-out
and batch size:

* ``fixed``: the batch's ``x`` (served features);
* ``embedding``: the batch's rows of a ``pyg_dist.DistEmbedding`` of
  ``--dim`` columns served as the attribute ``emb`` (read with autograd),
  updated on the servers by ``pyg_dist.optim.SparseAdam`` every step.

Prints one line per run and a JSON line with both rates, the ratio
(embedding / fixed, seeds/s) and the load average. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any, Optional

import torch


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=50_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=20, help="timed training steps per run")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per run")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--staleness", type=int, nargs="+", default=[0, 1],
                   help="DistEmbedding staleness values to time (0: reads wait for every "
                        "push; 1: a step's pushes overlap the next batch)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def train(loader: Any, attr: str, model: Any, optimizers: list[Any], warmup: int,
          batches: int) -> tuple[float, int]:
    """Seconds and seeds of ``batches`` training steps after ``warmup``."""
    import torch.nn.functional as F

    it = iter(loader)
    seeds, start = 0, 0.0
    for step in range(warmup + batches):
        if step == warmup:
            start = time.perf_counter()
        batch = next(it)
        for opt in optimizers:
            opt.zero_grad()
        out = model(batch[attr], batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        for opt in optimizers:
            opt.step()
        seeds += int(batch.batch_size) if step >= warmup else 0
    for opt in optimizers:  # the last pushes count
        getattr(opt, "flush", lambda: None)()
    seconds = time.perf_counter() - start
    del it  # stops a prefetch pipeline's threads
    return seconds, seeds


def run(data: Any, root: str, args: argparse.Namespace, seeds: torch.Tensor,
        staleness: Optional[int]) -> float:
    """seeds/s of one run (see the module)."""
    from torch_geometric.nn.models import GraphSAGE

    import pyg_dist
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.partitioning.writer import partition

    partition(data, args.parts, root)
    with LocalCluster(root) as cluster:
        fs, gs = pyg_dist.connect(cluster.endpoints)
        try:
            torch.manual_seed(args.seed)
            model = GraphSAGE(args.dim, 64, num_layers=len(args.fanout),
                              out_channels=int(data.y.max()) + 1)
            optimizers: list[Any] = [torch.optim.Adam(model.parameters(), lr=0.01)]
            attr = "x"
            if staleness is not None:
                emb = pyg_dist.DistEmbedding((fs, gs), "bench", args.dim, init="uniform",
                                             attr_name="emb", staleness=staleness)
                optimizers.append(pyg_dist.optim.SparseAdam([emb], lr=0.01))
                attr = "emb"
            loader = pyg_dist.DistNeighborLoader(
                (fs, gs), num_neighbors=args.fanout, input_nodes=seeds,
                batch_size=args.batch_size, prefetch=args.prefetch, seed=args.seed)
            seconds, count = train(loader, attr, model, optimizers, args.warmup, args.batches)
        finally:
            fs.close()
    rate = count / seconds
    name = f"fixed x dim {args.dim} (served)" if staleness is None else \
        f"embedding dim {args.dim}, staleness {staleness}"
    print(f"{name:<34} {rate:>10,.0f} seeds/s ({count} seeds, {seconds:.2f}s)", flush=True)
    return rate


def main() -> None:
    args = parse_args()
    from pyg_dist.datasets import fake

    data = fake(num_nodes=args.num_nodes, avg_degree=args.avg_degree, num_channels=args.dim,
                seed=args.seed)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges; fan-out "
          f"{args.fanout}, batch {args.batch_size}, prefetch {args.prefetch}, {args.parts} "
          f"parts on loopback", flush=True)
    total = args.batch_size * (args.batches + args.warmup)
    seeds = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(
        args.seed))[:total]
    bare = data.clone()
    del bare.x
    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-emb-") as tmp:
        fixed = run(data, f"{tmp}/fixed", args, seeds, None)
        learned = {k: run(bare, f"{tmp}/bare-{k}", args, seeds, k) for k in args.staleness}
    print(json.dumps({"fixed_seeds_per_s": round(fixed, 1),
                      "embedding_seeds_per_s": {k: round(v, 1) for k, v in learned.items()},
                      "ratio": {k: round(v / fixed, 3) for k, v in learned.items()},
                      "dim": args.dim, "prefetch": args.prefetch,
                      "load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
