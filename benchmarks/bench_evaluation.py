"""Evaluation at 2 ranks: each rank its share (the default) vs every rank everything.

    .venv/bin/python benchmarks/bench_evaluation.py [--nodes 20000] [--nproc 2]

Partitions a FakeDataset graph into a temporary directory, then runs itself
under ``pyg-dist launch --nproc N``: each rank evaluates a GraphSAGE over
every node twice, once with the default split (``DistMetric`` reduces the
accuracy) and once with ``split=False`` (every rank evaluates every node,
what ``rank=0, world_size=1`` used to do). Rank 0 prints one JSON line:
the best of ``--repeats`` wall times of each, their ratio, and both
accuracies (equal: the same nodes, counted once).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=20_000)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def evaluate(data, model, split: bool, batch_size: int) -> tuple[float, float]:
    """(seconds, accuracy) of one evaluation over every node."""
    import torch
    import torch.distributed as dist

    import pyg_dist
    from pyg_dist.loader.evaluation import accuracy

    dist.barrier()
    start = time.perf_counter()
    loader = pyg_dist.DistNeighborLoader(data, num_neighbors=[10, 10], batch_size=batch_size,
                                         split=split, seed=0)
    metric = pyg_dist.DistMetric("accuracy")
    preds, targets = [], []
    with torch.no_grad():
        for batch in loader:
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            y = batch.y[:batch.batch_size]
            if split:
                metric.update(out, y, batch.input_id)
            else:  # every rank holds every prediction: nothing to reduce
                preds.append(out)
                targets.append(y)
    acc = metric.compute() if split else accuracy(torch.cat(preds), torch.cat(targets))
    dist.barrier()
    return time.perf_counter() - start, acc


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch_geometric.nn.models import GraphSAGE

    import pyg_dist

    data = pyg_dist.init_trainer()[0]
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 64, num_layers=2, out_channels=data.num_classes).eval()
    times: dict[str, list[float]] = {"split": [], "every_rank_all": []}
    accs: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, split in (("split", True), ("every_rank_all", False)):
            seconds, accs[name] = evaluate(data, model, split, args.batch_size)
            times[name].append(seconds)
    if dist.get_rank() == 0:
        best = {k: min(v) for k, v in times.items()}
        print(json.dumps({"nodes": data.num_nodes, "ranks": dist.get_world_size(),
                          "seconds": best, "ratio": best["split"] / best["every_rank_all"],
                          "accuracy": accs, "load": os.getloadavg()}), flush=True)
    data.close()


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    import pyg_dist
    from pyg_dist.datasets import fake

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "parts")
        pyg_dist.partition(fake(args.nodes, num_channels=64, seed=0), args.nproc, root)
        subprocess.run([sys.executable, "-m", "pyg_dist", "launch", root, "--nproc",
                        str(args.nproc), "--quiet-ranks", __file__, "--worker", "--nodes",
                        str(args.nodes), "--repeats", str(args.repeats), "--batch-size",
                        str(args.batch_size)], check=True)


if __name__ == "__main__":
    main()
