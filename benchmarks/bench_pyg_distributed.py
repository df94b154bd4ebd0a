"""PyG's deprecated ``torch_geometric.distributed`` loader: seeds/s and sampled edges/s.

    .venv/bin/python benchmarks/bench_pyg_distributed.py          # ~100k nodes, ~2M edges
    .venv/bin/python benchmarks/bench_pyg_distributed.py --num-nodes 20000 --batches 10

Builds the FakeDataset-style graph of ``benchmarks/bench_loader.py``
(``pyg_dist.datasets.fake``), then runs
:func:`pyg_dist_bench.pyg_distributed_baseline.run_pyg_distributed_baseline`:
PyG's ``Partitioner`` into ``--parts`` parts, one process per part (PyG's
``LocalFeatureStore`` / ``LocalGraphStore``, torch RPC on loopback), each
iterating PyG's ``DistNeighborLoader`` over the seeds its part owns. pyg-lib's
``dist_neighbor_sample`` and its two companions are pure-torch stand-ins (the
printed note says exactly what was stood in or patched). Figures, not
assertions: a hang prints ``hung after N s``. Needs the benchmarks package
installed (``pip install -e benchmarks/``): its worker processes import it.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=100_000)
    p.add_argument("--avg-degree", type=float, default=10.0,
                   help="edges drawn per node before symmetrising (10 gives ~2M edges "
                        "for 100k nodes)")
    p.add_argument("--channels", type=int, default=128)
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--fanout", type=int, nargs="+", default=[15, 10])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=20, help="timed batches per process")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches per process")
    p.add_argument("--num-workers", type=int, default=0,
                   help="DistNeighborLoader sampler sub-processes per process")
    p.add_argument("--concurrency", type=int, default=1, help="PyG's RPC concurrency")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before 'hung'")
    p.add_argument("--workdir", default=None, help="keep partitions and logs here")
    p.add_argument("--json", action="store_true", help="also print the full result as JSON")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    from pyg_dist.datasets import fake
    from pyg_dist_bench.pyg_distributed_baseline import run_pyg_distributed_baseline

    data = fake(num_nodes=args.num_nodes, avg_degree=args.avg_degree,
                num_channels=args.channels, seed=args.seed)
    # Every node is a candidate seed (as in bench_loader.py), not only train_mask.
    seeds = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(args.seed))
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges, x {tuple(data.x.shape)}; "
          f"fan-out {args.fanout}, batch {args.batch_size}, {args.parts} processes on loopback, "
          f"{args.batches} timed batches each", flush=True)
    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-pygdist-") as tmp:
        out = run_pyg_distributed_baseline(
            data, args.parts, args.fanout, args.batch_size, args.batches,
            args.workdir or f"{tmp}/run", args.timeout, num_workers=args.num_workers,
            concurrency=args.concurrency, warmup_batches=args.warmup, seed=args.seed,
            input_nodes=seeds)
    print(f"partitioned (PyG Partitioner, {out.get('metis')}) in "
          f"{out.get('partition_s', 0.0):.1f}s; run {out.get('total_s', 0.0):.1f}s in all")
    if out["status"] == "ok":
        for r in out["per_rank"]:
            print(f"  process {r['rank']}: {r['seeds'] / r['elapsed_s']:>10,.0f} seeds/s "
                  f"{r['edges'] / r['elapsed_s']:>13,.0f} edges/s ({r['batches']} batches, "
                  f"{r['elapsed_s']:.2f}s, loader start {r['init_s']:.1f}s)")
        print(f"PyG torch_geometric.distributed ({args.parts} processes): "
              f"{out['seeds_per_s']:,.0f} seeds/s {out['edges_per_s']:,.0f} edges/s "
              f"({out['seeds']} seeds, {out['edges']} edges, {out['wall_s']:.2f}s)")
    else:
        print(f"PyG torch_geometric.distributed: {out['result']}")
    print(f"note: {out['note']}")
    if args.json:
        print(json.dumps({k: v for k, v in out.items() if k != "traceback"}, indent=1))


if __name__ == "__main__":
    main()
