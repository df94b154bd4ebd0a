"""Benchmark: partition a 1M-node, ~20M-edge FakeDataset-style graph into 4
parts with METIS, and print wall time and peak memory.

Not a test: it prints figures. Two child processes keep the numbers honest:

1. ``generate`` builds the graph the way PyG's ``FakeDataset`` does (uniform
   random edges without self loops, ``x = randn + y``, labels, a training
   mask) and saves it to a safetensors file;
2. ``partition`` loads that file, calls ``pyg_dist.partition`` and reports its
   own peak RSS (``ru_maxrss``), so graph generation does not count.

Usage::

    .venv/bin/python benchmarks/bench_partition.py [--nodes 1000000] \\
        [--edges 20000000] [--features 64] [--parts 4] [--partitioner metis]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> bool:
    """Resets the kernel's peak-RSS mark (VmHWM), so that loading the input
    does not count; returns False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def generate(args: argparse.Namespace) -> None:
    """Builds the graph and writes it to ``args.graph``."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(0)
    n, e = args.nodes, args.edges
    edge_index = torch.randint(0, n, (2, e), generator=gen)
    loops = edge_index[0] == edge_index[1]
    edge_index[1, loops] = (edge_index[1, loops] + 1) % n  # no self loops, as FakeDataset
    y = torch.randint(0, 10, (n,), generator=gen)
    x = torch.randn(n, args.features, generator=gen)
    x += y.unsqueeze(1)
    train_mask = torch.rand(n, generator=gen) < 0.1
    save_file({"edge_index": edge_index, "x": x, "y": y, "train_mask": train_mask}, args.graph)


def partition(args: argparse.Namespace) -> None:
    """Loads the graph, partitions it, prints one JSON line of figures."""
    import torch
    from safetensors.torch import load_file
    from torch_geometric.data import Data

    import pyg_dist

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    baseline = _status_mb("VmRSS")
    # load_file maps the file; clone so the input lives in anonymous memory
    # like a graph built in the process, then drop the mapping.
    tensors = {k: v.clone() for k, v in load_file(args.graph).items()}
    data = Data(**tensors)
    del tensors
    input_bytes = data.edge_index.numel() * data.edge_index.element_size() \
        + data.x.numel() * data.x.element_size()
    loaded = _status_mb("VmRSS")
    reset = _reset_peak()
    start = time.perf_counter()
    reader = pyg_dist.partition(data, args.parts, args.out, args.partitioner,
                                progress=False, **json.loads(args.options))
    wall = time.perf_counter() - start
    # VmHWM: peak since the reset, i.e. of partition() with the input resident.
    # Without a reset, fall back to the lifetime peak (includes loading).
    peak = _status_mb("VmHWM") if reset else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lifetime = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats = reader.meta["stats"]
    figures = {
        "nodes": data.num_nodes, "edges": data.num_edges, "features": data.x.size(1),
        "parts": args.parts, "partitioner": args.partitioner, "options": args.options,
        "wall_s": round(wall, 1), "input_mb": round(input_bytes / 2**20, 1),
        "rss_before_load_mb": round(baseline, 1), "rss_after_load_mb": round(loaded, 1),
        "peak_rss_mb": round(peak, 1), "peak_is_partition_only": reset,
        "lifetime_peak_rss_mb": round(lifetime, 1),
        "peak_over_input": round(peak * 2**20 / input_bytes, 2),
        "peak_minus_baseline_over_input": round((peak - baseline) * 2**20 / input_bytes, 2),
        "edge_cut_fraction": round(stats["edge_cut_fraction"], 4),
        "node_balance": round(stats["node_balance"], 3),
        "edge_balance": round(stats["edge_balance"], 3),
    }
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=20_000_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--partitioner", default="metis")
    parser.add_argument("--options", default="{}", help="partitioner options as JSON")
    parser.add_argument("--stage", choices=["all", "generate", "partition"], default="all")
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage == "generate":
        return generate(args)
    if args.stage == "partition":
        return partition(args)
    common = [f"--nodes={args.nodes}", f"--edges={args.edges}", f"--features={args.features}",
              f"--parts={args.parts}", f"--partitioner={args.partitioner}",
              f"--options={args.options}"]
    with tempfile.TemporaryDirectory(prefix="bench-partition-") as tmp:
        graph = str(Path(tmp) / "graph.safetensors")
        start = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--stage=generate", f"--graph={graph}",
                        *common], check=True)
        print(f"generated the graph in {time.perf_counter() - start:.1f} s", flush=True)
        subprocess.run([sys.executable, __file__, "--stage=partition", f"--graph={graph}",
                        f"--out={Path(tmp) / 'parts'}", *common], check=True)


if __name__ == "__main__":
    main()
