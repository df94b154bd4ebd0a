"""Benchmark: partition heterogeneous graphs and print wall time, edge cut
and the balance of every node type.

Not a test: it prints one JSON line per graph. The graphs: IMDB from the
``graphdatascience`` wheel (``pyg_dist.datasets:imdb``) and a
``FakeHeteroDataset`` graph (``pyg_dist.datasets.fake_hetero``). Graph
loading is not timed; ``wall_s`` is ``pyg_dist.partition`` alone.

Usage::

    .venv/bin/python benchmarks/bench_partition_hetero.py [--graph imdb|fake|both] \\
        [--parts 2] [--fake-parts 4] [--partitioner metis] [--fake-nodes 30000] \\
        [--fake-degree 10]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def run(name: str, data, parts: int, partitioner: str) -> dict:
    """Partitions ``data`` into a temporary directory and returns the figures."""
    import pyg_dist

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        reader = pyg_dist.partition(data, parts, Path(tmp) / "ds", partitioner)
        wall = time.perf_counter() - start
        meta = reader.meta
    return {
        "graph": name, "partitioner": partitioner, "parts": parts,
        "num_nodes": meta["num_nodes"], "num_edges": meta["num_edges"],
        "wall_s": round(wall, 2),
        "edge_cut_fraction": round(meta["stats"]["edge_cut_fraction"], 4),
        "node_balance": round(meta["stats"]["node_balance"], 4),
        "type_balance": {t["type"]: round(t["balance"], 4) for t in meta["node_types"]},
        "total_halo_nodes": meta["stats"]["total_halo_nodes"],
    }


def main() -> None:
    """Parses the arguments and prints one JSON line per graph."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", choices=("imdb", "fake", "both"), default="both")
    parser.add_argument("--parts", type=int, default=2, help="parts for IMDB")
    parser.add_argument("--fake-parts", type=int, default=4, help="parts for the fake graph")
    parser.add_argument("--partitioner", default="metis")
    parser.add_argument("--fake-nodes", type=int, default=30000,
                        help="average nodes per node type of the fake graph")
    parser.add_argument("--fake-degree", type=float, default=10.0,
                        help="average edges per source node and edge type")
    args = parser.parse_args()
    from pyg_dist.datasets import fake_hetero, imdb

    if args.graph in ("imdb", "both"):
        print(json.dumps(run("imdb", imdb(), args.parts, args.partitioner)), flush=True)
    if args.graph in ("fake", "both"):
        data = fake_hetero(num_nodes=args.fake_nodes, avg_degree=args.fake_degree,
                           num_channels=16)
        print(json.dumps(run("fake_hetero", data, args.fake_parts, args.partitioner)),
              flush=True)


if __name__ == "__main__":
    main()
