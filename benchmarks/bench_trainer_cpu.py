"""Core-ms per batch of the trainer and of each server, synchronous loader.

    .venv/bin/python benchmarks/bench_trainer_cpu.py                 # 100k nodes, 128 features
    .venv/bin/python benchmarks/bench_trainer_cpu.py --profile 20    # + cProfile of the trainer
    .venv/bin/python benchmarks/bench_trainer_cpu.py --tcp           # shared memory off
    .venv/bin/python benchmarks/bench_trainer_cpu.py --server-hops   # servers sample the hops
    .venv/bin/python benchmarks/bench_trainer_cpu.py --breakdown     # + main thread by function

On two cores the loader is CPU-bound, so the CPU time each process spends
per batch decides its throughput (``docs/performance.md``). This builds a
``pyg_dist.datasets.fake`` graph (cached under ``--cache``), serves its
``--parts`` METIS parts from ``pyg-dist serve`` processes on loopback, and
runs ``DistNeighborLoader(prefetch=0)`` for ``--batches`` batches after a
warm-up, in ``--rounds`` rounds; per round it prints the trainer's process
CPU time per batch (user + system, every thread: ``psutil``), each
server's, and the wall time per batch. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from typing import Any

import torch


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=100_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--channels", type=int, default=128)
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--fanout", type=int, nargs="+", default=[15, 10])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=40, help="timed batches per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--tcp", action="store_true", help="every reply over TCP (shared memory off)")
    p.add_argument("--server-hops", action="store_true",
                   help="the servers sample a batch's hops among themselves (sample_tree); "
                        "by default every hop goes back to the trainer")
    p.add_argument("--colocate", action="store_true",
                   help="read every part in the trainer's process (connect(colocate=True)): "
                        "the servers then serve nothing")
    p.add_argument("--hold", type=int, default=1,
                   help="batches the consumer keeps alive at once (a training step holds 1)")
    p.add_argument("--threads-detail", action="store_true",
                   help="also print the trainer's core-ms per batch by thread")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also profile N batches with cProfile and print the top functions")
    p.add_argument("--breakdown", action="store_true",
                   help="also print the trainer main thread's CPU time per batch in the "
                        "loader's main steps (time.thread_time of each call, the last round)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads of the trainer (default: cores / (parts + 1), as "
                        "pyg-dist bench)")
    p.add_argument("--cache", default="/tmp/pyg-dist-bench-trainer-cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def dataset(args: argparse.Namespace) -> str:
    """The partitioned graph's directory (partitioned once per shape)."""
    from pyg_dist.datasets import fake
    from pyg_dist.partitioning.writer import partition

    root = (f"{args.cache}/n{args.num_nodes}-d{args.avg_degree}-c{args.channels}-"
            f"p{args.parts}-s{args.seed}")
    if not os.path.exists(f"{root}/meta.json"):
        data = fake(num_nodes=args.num_nodes, avg_degree=args.avg_degree,
                    num_channels=args.channels, seed=args.seed)
        partition(data, args.parts, root, partitioner="metis")
    return root


def cpu_s(proc: Any) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def thread_names() -> dict[int, str]:
    """Native thread id -> name, for this process's Python threads."""
    import threading

    return {t.native_id: t.name for t in threading.enumerate() if t.native_id}


# What --breakdown times on the main thread: (module, attribute path); a
# function imported by name is patched where the caller looks it up.
BREAKDOWN = [
    ("pyg_dist.loader.dist_neighbor_loader", "DistNeighborLoader._produce"),
    ("pyg_dist.sampler.dist_neighbor_sampler", "DistNeighborSampler.sample_from_nodes"),
    ("pyg_dist.loader.dist_neighbor_loader", "data_batch"),
    ("pyg_dist.store.remote_feature_store", "RemoteFeatureStore._multi_get_tensor"),
    ("pyg_dist.partitioning.book", "PartitionBook.split"),
    ("pyg_dist.routing.id_router", "Router.check_ids"),
    ("pyg_dist.store.remote_feature_store", "row_request"),
    ("pyg_dist.store.remote_feature_store", "fetch_rows"),
    ("pyg_dist.routing.id_router", "Router.call_all"),
    ("pyg_dist.sampler.dist_neighbor_sampler", "sample_tree"),
    ("pyg_dist.rpc.client", "RpcClient._send"),
    ("pyg_dist.rpc.retrying", "RetryingClient.result"),
    ("torch_geometric.data.feature_store", "FeatureStore.multi_get_tensor"),
    ("pyg_dist.loader.dist_neighbor_loader", "DistNeighborLoader.filter_fn"),
    ("pyg_dist.sampler.dist_neighbor_sampler", "DistNeighborSampler.draw_seed"),
    ("torch_geometric.sampler.base", "NodeSamplerInput.__getitem__"),
    ("pyg_dist.hops.one_hop", "_reassembled"),
    ("pyg_dist.hops.one_hop", "reassemble"),
    ("pyg_dist.hops.one_hop", "_check_neighbours"),
]


def install_breakdown() -> dict[str, list[int]]:
    """Wraps the BREAKDOWN functions: ``{name: [calls, ns]}`` of the main
    thread's CPU time in them (nested calls count in both)."""
    import importlib
    import threading

    totals: dict[str, list[int]] = {}
    for module, path in BREAKDOWN:
        owner: Any = importlib.import_module(module)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        totals[path] = [0, 0]
        setattr(owner, name, _timed(getattr(owner, name), totals[path],
                                    threading.main_thread()))
    return totals


def _timed(function: Any, counter: list[int], main_thread: Any) -> Any:
    """``function``, adding its calls and CPU ns on ``main_thread`` to ``counter``."""
    import functools
    import threading

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not main_thread:
            return function(*args, **kwargs)
        start = time.thread_time_ns()
        try:
            return function(*args, **kwargs)
        finally:
            counter[0] += 1
            counter[1] += time.thread_time_ns() - start

    return wrapped


def run_round(loader: Any, batches: int, hold: int, procs: list[Any],
              detail: bool = False) -> tuple[float, ...]:
    """Trainer core-ms, each server's core-ms and wall ms, per batch."""
    it = iter(loader)
    held: list[Any] = []
    before = [cpu_s(p) for p in procs]
    threads = {t.id: t.user_time + t.system_time for t in procs[0].threads()}
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(it, None)
        if batch is None:  # the epoch ran out (a small graph): the next one
            it = iter(loader)
            batch = next(it)
        held.append(batch)
        del held[:-hold]
    wall = time.perf_counter() - start
    after = [cpu_s(p) for p in procs]
    if detail:
        names = thread_names()
        for t in procs[0].threads():
            spent = 1000 * (t.user_time + t.system_time - threads.get(t.id, 0.0)) / batches
            if spent >= 0.05:
                print(f"  thread {names.get(t.id, t.id)}: {spent:.2f} core-ms per batch")
    return tuple(1000 * (a - b) / batches for a, b in zip(after, before)) + \
        (1000 * wall / batches,)


def main() -> None:
    args = parse_args()
    import psutil

    from pyg_dist.cluster import LocalCluster
    from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
    from pyg_dist.rpc.config import RpcConfig
    from pyg_dist.store.connect import connect

    root = dataset(args)
    totals = install_breakdown() if args.breakdown else None
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // (args.parts + 1)))
    gen = torch.Generator().manual_seed(args.seed)
    seeds = torch.randperm(args.num_nodes, generator=gen)
    with LocalCluster(root, forwarding=args.server_hops) as cluster:
        config = RpcConfig(shared_memory_bytes=0) if args.tcp else None
        fs, gs = connect(cluster.endpoints, config=config, colocate=args.colocate)
        procs = [psutil.Process()] + [psutil.Process(p.pid) for p in cluster.processes]
        try:
            loader = DistNeighborLoader((fs, gs), num_neighbors=args.fanout,
                                        input_nodes=seeds, batch_size=args.batch_size,
                                        shuffle=True, prefetch=0, seed=args.seed)
            run_round(loader, args.warmup, args.hold, procs)
            print(f"{args.num_nodes:,} nodes, {args.channels} features, {args.parts} parts, "
                  f"fan-out {args.fanout}, batch {args.batch_size}, "
                  f"{torch.get_num_threads()} trainer threads, "
                  f"{'TCP' if args.tcp else 'shared memory'}; per batch:", flush=True)
            for r in range(args.rounds):
                for counter in (totals or {}).values():
                    counter[:] = [0, 0]
                figures = run_round(loader, args.batches, args.hold, procs,
                                    args.threads_detail)
                servers = " ".join(f"{f:6.1f}" for f in figures[1:-1])
                print(f"round {r}: trainer {figures[0]:6.1f} core-ms  servers {servers} "
                      f"core-ms  wall {figures[-1]:6.1f} ms  load {os.getloadavg()[0]:.1f}",
                      flush=True)
            for path, (calls, ns) in (totals or {}).items():
                print(f"  main thread, {path}: {ns / 1e6 / args.batches:.3f} ms per batch "
                      f"({calls / args.batches:.1f} calls)")
            if args.profile:
                profiler = cProfile.Profile()
                profiler.enable()
                run_round(loader, args.profile, args.hold, procs)
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        finally:
            fs.close()


if __name__ == "__main__":
    main()
