"""Does the loader keep a GPU busy? A products-shaped graph, JSON rows.

    .venv/bin/python benchmarks/bench_gpu_products.py                   # GPU machine
    .venv/bin/python benchmarks/bench_gpu_products.py --scale 0.01 --device cpu

Builds (once, cached under ``--cache``) a graph shaped like ogbn-products:
2.45M nodes, 62M directed edges whose sources follow a power law, 100
float32 features, 47 classes, in 4 random parts; ``--scale`` shrinks nodes
and edges alike. Serves it with ``LocalCluster(forwarding=True)`` on this
host and, for every fan-out, prints one JSON row per measurement:

* ``compute``: GraphSAGE (256 hidden) training steps over batches already on
  the device: what the GPU could do if the loader cost nothing;
* ``train`` / ``loader``: the same steps fed by ``DistNeighborLoader``
  (``prefetch`` batches in flight, ``device`` set), and the loader alone,
  with the servers sampling the hops among themselves (``server_hops``) and
  hop by hop; each once without a cache and once with
  ``CachedFeatureStore(..., capacity, device=...)`` (``cache``); with
  ``--sampling colocated`` also the parts served in the trainer's process
  (``connect(colocate=True)``, uncached, hop by hop there).

Each row has ``seeds_per_s``, ``sampled_nodes_per_s`` (nodes whose features
a batch carries), ``vs_compute`` (seeds/s over the compute row's) and, for
the loader's rows, ``trainer_cores`` / ``server_cores``: CPU seconds per
second of the trainer's process and of each server's during the row (a
process near 1.0 with Python work is bound by its interpreter lock). The
issue's targets (an H100 or H200): [15, 10] train >= 0.5x compute,
[15, 10, 5] >= 0.9x, loader >= 20M sampled nodes/s, whole table cached
[15, 10] train >= 0.7x. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from typing import Any, Optional

import torch

PRODUCTS_NODES = 2_449_029
PRODUCTS_EDGES = 61_859_140


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0,
                   help="fraction of products' nodes and edges (0.01 runs on a laptop CPU)")
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--classes", type=int, default=47)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--fanouts", nargs="+", default=["15,10", "15,10,5"],
                   help="fan-outs, each comma-separated")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--prefetch", type=int, default=8)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batches", type=int, default=100, help="timed batches per row")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed batches per row (at least 2 x --prefetch: batches "
                        "prefetched before the clock starts would count as free)")
    p.add_argument("--cache-capacity", type=float, default=1.0,
                   help="fraction of the nodes the feature cache holds (1.0: all)")
    p.add_argument("--no-cache-rows", action="store_true", help="skip the cached rows")
    p.add_argument("--sampling", nargs="+",
                   choices=("server_hops", "server_hops_fetched", "hop_by_hop", "colocated"),
                   default=["server_hops", "hop_by_hop"],
                   help="which sampling rows to run (server_hops_fetched: the servers "
                        "sample the hops, the trainer then fetches the rows itself, as "
                        "before a tree could have them written: protocol version 5; "
                        "colocated: the parts mapped and read in the trainer's process, "
                        "connect(colocate=True))")
    p.add_argument("--feature-dtype", choices=("float16", "bfloat16"),
                   help="store and serve the features in this precision (the model casts "
                        "them to float32 on the device)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--profile-loader", type=float, default=0.0, metavar="SECONDS",
                   help="instead of the rows: the loader alone (server hops, first fan-out) "
                        "for SECONDS under py-spy (trainer and every server; --py-spy names "
                        "the binary), then each process's top functions as JSON rows")
    p.add_argument("--py-spy", default="py-spy", help="the py-spy binary")
    p.add_argument("--py-spy-gil", action="store_true",
                   help="with --profile-loader: sample only the thread holding each "
                        "process's interpreter lock (busy_threads near 1.0: that lock "
                        "bounds the process)")
    p.add_argument("--trainers", type=int, default=0, metavar="N",
                   help="instead of the rows: the loader alone (server hops, uncached, "
                        "first fan-out) in N trainer processes at once, each over its "
                        "share of the seeds; does the rate grow with N?")
    p.add_argument("--profile-dir", default="/tmp/pyg-dist-bench-profile",
                   help="where py-spy's raw stacks go")
    p.add_argument("--cache", default="/tmp/pyg-dist-bench-products")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def products_like(num_nodes: int, num_edges: int, features: int, classes: int,
                  seed: int) -> Any:
    """Power-law sources (rank ** -0.8, ranks shuffled), uniform destinations."""
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    weight = torch.arange(1, num_nodes + 1, dtype=torch.float64).pow_(-0.8)
    relabel = torch.randperm(num_nodes, generator=gen)
    src = torch.empty(num_edges, dtype=torch.long)
    chunk = 1 << 24  # multinomial draws in chunks: its work buffers stay small
    for start in range(0, num_edges, chunk):
        count = min(chunk, num_edges - start)
        src[start:start + count] = relabel[torch.multinomial(weight, count, replacement=True,
                                                             generator=gen)]
    dst = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    keep = src != dst
    return Data(x=torch.randn(num_nodes, features, generator=gen),
                y=torch.randint(0, classes, (num_nodes,), generator=gen),
                edge_index=torch.stack([src[keep], dst[keep]]), num_nodes=num_nodes)


def dataset(args: argparse.Namespace) -> str:
    """The partitioned graph's directory (built once per shape)."""
    from pyg_dist.partitioning.writer import partition

    nodes = max(1000, int(PRODUCTS_NODES * args.scale))
    edges = max(10_000, int(PRODUCTS_EDGES * args.scale))
    dtype = f"-{args.feature_dtype}" if args.feature_dtype else ""
    root = f"{args.cache}/n{nodes}-e{edges}-f{args.features}{dtype}-p{args.parts}-s{args.seed}"
    if not os.path.exists(f"{root}/meta.json"):
        data = products_like(nodes, edges, args.features, args.classes, args.seed)
        partition(data, args.parts, root, partitioner="random", progress=False,
                  feature_dtype=args.feature_dtype)
    return root


def model_and_step(args: argparse.Namespace, layers: int, device: torch.device) -> Any:
    """GraphSAGE and one training step on a batch (loss on its seeds)."""
    from torch_geometric.nn.models import GraphSAGE

    model = GraphSAGE(args.features, args.hidden, layers, args.classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(batch: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        out = model(batch.x.float(), batch.edge_index)[:batch.batch_size]  # no-op for fp32
        loss = torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size].long())
        loss.backward()
        optimizer.step()

    return step


def cpu_seconds(pids: list[int]) -> list[float]:
    """User + system CPU seconds of each process so far (every thread)."""
    import psutil

    return [sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids]


def timed(batches: Iterator[Any], args: argparse.Namespace, device: torch.device,
          step: Any = None, cores: Optional[dict[str, Any]] = None
          ) -> tuple[float, int, int]:
    """Seconds, seeds and feature rows of ``args.batches`` batches after the
    warm-up, each through ``step`` when given; with ``cores`` (``{"pids":
    [trainer, *servers]}``), the cores each process used meanwhile go into
    it as ``trainer_cores`` and ``server_cores``."""
    for _ in range(warmup_batches(args)):
        batch = next(batches)
        if step is not None:
            step(batch)
    _sync(device)
    seeds = rows = 0
    before = cpu_seconds(cores["pids"]) if cores is not None else []
    start = time.perf_counter()
    for _ in range(args.batches):
        batch = next(batches)
        if step is not None:
            step(batch)
        seeds += int(batch.batch_size)
        rows += int(batch.x.size(0))
    _sync(device)
    seconds = time.perf_counter() - start
    if cores is not None:
        used = [round((b - a) / seconds, 2)
                for a, b in zip(before, cpu_seconds(cores["pids"]))]
        cores.update(trainer_cores=used[0], server_cores=used[1:])
    return seconds, seeds, rows


def warmup_batches(args: argparse.Namespace) -> int:
    """Untimed batches before a row's clock starts: ``--warmup``, and at least
    two prefetch queues' worth. A loader starts ``prefetch`` batches at once;
    timing from the third batch counted the work done on the others before
    the clock started (40 timed batches at prefetch 32: 124k seeds/s, 150 of
    them after 64: 69k, on the same H200)."""
    return max(args.warmup, 2 * args.prefetch)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def row(name: str, fanout: list[int], figures: tuple[float, int, int],
        compute: float = 0.0, **extra: Any) -> dict[str, Any]:
    """One JSON row; prints it and returns it."""
    seconds, seeds, rows = figures
    out = {"row": name, "fanout": fanout, "seeds_per_s": round(seeds / seconds, 1),
           "sampled_nodes_per_s": round(rows / seconds, 1), **extra}
    if compute:
        out["vs_compute"] = round(out["seeds_per_s"] / compute, 3)
    print(json.dumps(out), flush=True)
    return out


def loader(stores: Any, args: argparse.Namespace, fanout: list[int], seeds: torch.Tensor,
           device: torch.device, server_hops: bool, prefetch: int) -> Any:
    from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader

    return DistNeighborLoader(stores, num_neighbors=fanout, input_nodes=seeds,
                              batch_size=args.batch_size, shuffle=True, seed=args.seed,
                              prefetch=prefetch, server_hops=server_hops,
                              device=None if device.type == "cpu" else device)


def run_fanout(args: argparse.Namespace, stores: dict[str, Any], fanout: list[int],
               seeds: torch.Tensor, device: torch.device, pids: list[int]
               ) -> list[dict[str, Any]]:
    """Every row of one fan-out."""
    plain = stores["uncached"]
    step = model_and_step(args, len(fanout), device)
    # Compute only: the batches the loader makes, on the device beforehand.
    ready = [b.to(device) for b, _ in zip(loader(plain, args, fanout, seeds, device, True, 0),
                                          range(warmup_batches(args) + args.batches))]
    compute = row("compute", fanout, timed(iter(ready), args, device, step))["seeds_per_s"]
    del ready
    rows = []
    for cache, served in stores.items():
        if cache == "colocated":
            continue  # a sampling mode of the uncached rows
        for mode in args.sampling:
            if mode == "colocated" and cache != "uncached":
                continue
            pair = stores["colocated"] if mode == "colocated" else served
            hops = mode not in ("hop_by_hop", "colocated")
            if mode == "server_hops_fetched":  # the store lends a tree no outputs
                pair[0].tree_outputs = None
            try:
                for what, with_step in (("train", step), ("loader", None)):
                    batches = iter(loader(pair, args, fanout, seeds, device, hops,
                                          args.prefetch))
                    cores: dict[str, Any] = {"pids": pids}
                    figures = timed(batches, args, device, with_step, cores)
                    del cores["pids"]
                    rows.append(row(what, fanout, figures, compute, sampling=mode,
                                    cache=cache, prefetch=args.prefetch, parts=args.parts,
                                    **cores))
                    del batches  # stops the prefetch threads
            finally:
                pair[0].__dict__.pop("tree_outputs", None)
    return rows


_IDLE = ("poll (zmq", "Poller.poll", "wait (threading", "_wait_for_tstate", "acquire",
         "WorkQueue.get", "_parent_gone", "_worker (concurrent",
         "select", "sleep", "recv (zmq", "GarbageCollectorThread.run")


_RATE = 200  # py-spy samples a second


def profile_loader(args: argparse.Namespace, stores: Any, fanout: list[int],
                   seeds: torch.Tensor, device: torch.device, pids: list[int]) -> None:
    """The loader alone for ``args.profile_loader`` seconds while py-spy
    samples every process; prints each one's busiest functions."""
    import subprocess

    os.makedirs(args.profile_dir, exist_ok=True)
    batches = _endless(lambda: loader(stores, args, fanout, seeds, device, True, args.prefetch))
    for _ in range(args.warmup):
        next(batches)
    names = ["trainer", *(f"server{k}" for k in range(len(pids) - 1))]
    spies = [subprocess.Popen([args.py_spy, "record", "-p", str(pid), "-d",
                               str(int(args.profile_loader)), "-r", str(_RATE), "-f", "raw",
                               *(["--gil"] if args.py_spy_gil else []),
                               "--nonblocking", "-o", f"{args.profile_dir}/{name}.raw"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for pid, name in zip(pids, names)]
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < args.profile_loader + 1.0:
        next(batches)
        count += 1
    seconds = time.perf_counter() - start
    for spy in spies:
        spy.wait(60)
    del batches
    print(json.dumps({"row": "profiled", "batches_per_s": round(count / seconds, 1)}),
          flush=True)
    for name in names:
        top = _top_functions(f"{args.profile_dir}/{name}.raw")
        # Busy samples over those a fully busy thread would give: the busy
        # threads on average (with --gil, the interpreter lock's use).
        top["busy_threads"] = round(top.get("busy_samples", 0) / (_RATE * args.profile_loader), 2)
        print(json.dumps({"row": "profile", "process": name, "gil_only": args.py_spy_gil,
                          **top}), flush=True)


def _top_functions(path: str, top: int = 12) -> dict[str, Any]:
    """Busy samples of one py-spy raw file: the leaf functions and the
    pyg-dist functions (inclusive) with the largest shares."""
    import collections

    leaf: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    busy = 0
    try:
        lines = open(path).read().splitlines()
    except OSError as exc:
        return {"error": str(exc)}
    for line in lines:
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not n.isdigit() or any(i in frames[-1] for i in _IDLE):
            continue
        busy += int(n)
        leaf[frames[-1]] += int(n)
        for frame in set(f for f in frames if "pyg_dist" in f):
            inclusive[frame] += int(n)
    share = lambda c: [[round(v / max(busy, 1), 3), k[:110]] for k, v in c.most_common(top)]  # noqa: E731
    return {"busy_samples": busy, "leaf": share(leaf), "pyg_dist": share(inclusive)}


def trainer_processes(args: argparse.Namespace, endpoints: list[str], fanout: list[int],
                      seeds: torch.Tensor, pids: list[int]) -> None:
    """``args.trainers`` processes each run the loader alone over their share
    of the seeds, timed together after every one warmed up; one row with
    their seeds/s added up (and the servers' cores meanwhile)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    count = args.trainers
    barrier, results = ctx.Barrier(count + 1), ctx.Queue()
    procs = [ctx.Process(target=_trainer_process, daemon=True,
                         args=(args, endpoints, fanout, seeds[rank::count], barrier, results))
             for rank in range(count)]
    for proc in procs:
        proc.start()
    try:
        try:
            barrier.wait(timeout=600)
        except Exception:  # a child aborted it: its error is on the queue
            raise SystemExit(f"a trainer process failed: {results.get(timeout=60)}") from None
        before, start = cpu_seconds(pids[1:]), time.perf_counter()
        done = [results.get(timeout=600) for _ in procs]
        failed = [d for d in done if isinstance(d, str)]
        if failed:
            raise SystemExit(f"a trainer process failed: {failed[0]}")
        seconds = time.perf_counter() - start
        servers = [round((b - a) / seconds, 2) for a, b in zip(before, cpu_seconds(pids[1:]))]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    longest = max(d[0] for d in done)
    row("loader_processes", fanout, (longest, sum(d[1] for d in done), sum(d[2] for d in done)),
        trainers=count, prefetch=args.prefetch, parts=args.parts,
        each_seeds_per_s=[round(d[1] / d[0], 1) for d in done],
        trainer_cores=[d[3] for d in done], server_cores=servers)


def _trainer_process(args: argparse.Namespace, endpoints: list[str], fanout: list[int],
                     seeds: torch.Tensor, barrier: Any, results: Any) -> None:
    """One of :func:`trainer_processes`: puts ``(seconds, seeds, rows, cores)``,
    or the error's text, on ``results``."""
    from pyg_dist.store.connect import connect

    try:
        device = torch.device(args.device)
        fs, gs = connect(endpoints)
        try:
            batches = _endless(lambda: loader((fs, gs), args, fanout, seeds, device, True,
                                              args.prefetch))
            for _ in range(warmup_batches(args)):
                next(batches)
            _sync(device)
            barrier.wait(timeout=600)
            (before,), start = cpu_seconds([os.getpid()]), time.perf_counter()
            count = rows = 0
            for _ in range(args.batches):
                batch = next(batches)
                count += int(batch.batch_size)
                rows += int(batch.x.size(0))
            _sync(device)
            seconds = time.perf_counter() - start
            (after,) = cpu_seconds([os.getpid()])
            results.put((seconds, count, rows, round((after - before) / seconds, 2)))
            del batches
        finally:
            fs.close()
    except BaseException as exc:  # the parent reports it instead of waiting
        barrier.abort()
        results.put(f"{type(exc).__name__}: {exc}")
        raise


def _endless(make: Any) -> Iterator[Any]:
    """Batches of loader after loader (a small graph's epoch may end first)."""
    while True:
        yield from make()


def _every_node(context: Any, budget: int) -> torch.Tensor:
    """Cache policy of the whole-table rows: the first ``budget`` ids."""
    return torch.arange(min(budget, context.num_nodes))


def main() -> None:
    args = parse_args()
    import shutil

    if args.profile_loader > 0 and shutil.which(args.py_spy) is None:
        raise SystemExit(f"--profile-loader needs py-spy: {args.py_spy!r} is not an executable "
                         f"(pip install py-spy, or name it with --py-spy PATH)")
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.store.cached_feature_store import CachedFeatureStore
    from pyg_dist.store.connect import connect

    device = torch.device(args.device)
    started = time.perf_counter()
    root = dataset(args)
    print(json.dumps({"row": "setup", "graph": root, "device": str(device),
                      "seconds": round(time.perf_counter() - started, 1)}), flush=True)
    with LocalCluster(root, forwarding=True) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            stores: dict[str, Any] = {"uncached": (fs, gs)}
            colocated = connect(cluster.endpoints, colocate=True) \
                if "colocated" in args.sampling else None
            if not args.no_cache_rows:
                # The whole table: every node (no ranking to compute); a part
                # of it: the nodes sampling reaches most (out-degree).
                whole = args.cache_capacity >= 1.0
                policy = _every_node if whole else "degree"
                cached = CachedFeatureStore(fs, args.cache_capacity, policy, graph_store=gs,
                                            device=device)
                stores["all" if whole else f"degree {args.cache_capacity:g}"] = (cached, gs)
            gen = torch.Generator().manual_seed(args.seed)
            seeds = torch.randperm(fs.num_nodes, generator=gen)
            pids = [os.getpid(), *(proc.pid for proc in cluster.processes)]
            if args.trainers > 0:
                trainer_processes(args, cluster.endpoints, [int(k) for k in
                                  args.fanouts[0].split(",")], seeds, pids)
                return
            if args.profile_loader > 0:
                profile_loader(args, stores["uncached"], [int(k) for k in
                               args.fanouts[0].split(",")], seeds, device, pids)
                return
            for text in args.fanouts:
                run_fanout(args, {**stores, "colocated": colocated}
                           if colocated is not None else stores,
                           [int(k) for k in text.split(",")], seeds, device, pids)
        finally:
            fs.close()
            if colocated is not None:
                colocated[0].close()
    print(json.dumps({"row": "total", "seconds": round(time.perf_counter() - started, 1)}),
          flush=True)


if __name__ == "__main__":
    main()
