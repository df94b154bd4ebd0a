"""DistNeighborLoader across simulated hosts: capped links against loopback TCP.

    sudo .venv/bin/python benchmarks/bench_hosts.py              # ~100k nodes, 2 parts
    sudo .venv/bin/python benchmarks/bench_hosts.py --rates 10gbit 1gbit 100mbit
    sudo .venv/bin/python benchmarks/bench_hosts.py --server-hops   # servers sample the hops

Needs root (network namespaces; ``tests/support/hosts.py`` builds them, so run
it from a checkout). Partitions a FakeDataset-style graph, then for each
setting times full batches (sampling, features, labels) of one trainer
process, synchronous (``prefetch=0``) and with ``--prefetch`` batches in
flight:

* ``loopback``: both servers and the trainer on one host, shared memory off
  (``PYG_DIST_SHARED_MEMORY_BYTES=0``): every reply over TCP on ``lo``;
* ``RATE``: each server on a host of its own, the trainer on a third, every
  host's link capped at RATE by ``tc ... tbf``.

Prints seeds/s, bytes on the wire per seed (everything every host sent
during the timed batches: replies, requests, TCP acknowledgements) and the
ratio to the loopback row. With ``--server-hops`` the servers get each
other's addresses (``--peers``) and the trainer sends each batch's hops to
one of them (``sample_tree``); the bytes then include what the servers send
each other. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=100_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--fanout", type=int, nargs="+", default=[15, 10])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=30, help="timed batches per loader")
    p.add_argument("--warmup", type=int, default=3, help="untimed batches per loader")
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--rates", nargs="+", default=["10gbit", "1gbit"],
                   help="link caps to measure, in tc's units")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--graph", choices=["fake", "power-law"], default="fake",
                   help="FakeDataset (uniform random edges) or a power-law graph "
                        "(pyg_dist.datasets.power_law, a few hubs in most neighbourhoods)")
    p.add_argument("--cache", type=float, nargs="+", default=[0.0], metavar="FRACTION",
                   help="run the trainer with a CachedFeatureStore of this fraction of the "
                        "nodes (0: no cache); several values, several rows")
    p.add_argument("--cache-policy", default="degree", help="cache policy plugin")
    p.add_argument("--server-hops", action="store_true",
                   help="the servers sample a batch's hops among themselves (sample_tree); "
                        "by default every hop goes back to the trainer")
    p.add_argument("--cache-now", type=float, default=0.0, help=argparse.SUPPRESS)
    # Internal: the trainer run inside a simulated host.
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args: argparse.Namespace) -> None:
    """Times the loader against ``PYG_DIST_SERVERS``: one JSON line before
    each prefetch setting (then waits for the caller to read the counters)
    and one after it (then waits again)."""
    import torch

    import pyg_dist

    total = args.batch_size * (args.batches + args.warmup)
    seeds = torch.randperm(args.num_nodes, generator=torch.Generator().manual_seed(
        args.seed))[:total]
    data = pyg_dist.RemoteData()
    stores = data
    cache_report = {}
    if args.cache_now > 0:
        fs, gs = data
        options = {"num_neighbors": args.fanout, "input_nodes": seeds} \
            if args.cache_policy == "frequency" else {}
        start = time.perf_counter()
        cached = pyg_dist.CachedFeatureStore(fs, args.cache_now, args.cache_policy,
                                             graph_store=gs, policy_options=options)
        cache_report = {"startup_s": time.perf_counter() - start}
        stores = (cached, gs)
    for prefetch in sorted({0, args.prefetch}):
        # The inputs are exactly the batches run: a prefetching loader has
        # nothing to fetch beyond them, so the counters see these batches only.
        loader = pyg_dist.DistNeighborLoader(
            stores, num_neighbors=args.fanout, input_nodes=seeds, batch_size=args.batch_size,
            prefetch=prefetch, seed=args.seed, server_hops=args.server_hops)
        print(json.dumps({"event": "start", "prefetch": prefetch}), flush=True)
        sys.stdin.readline()  # the caller read the counters
        it = iter(loader)
        for _ in range(args.warmup):
            next(it)
        timed = 0
        start = time.perf_counter()
        for batch in it:
            timed += int(batch.batch_size)
        seconds = time.perf_counter() - start
        if stores is not data:
            cache_report["hit_rate"] = stores[0].cache_stats()["hit_rate"]
        print(json.dumps({"event": "done", "prefetch": prefetch, "seeds": timed,
                          "seconds": seconds, "all_seeds": int(seeds.numel()),
                          "cache": cache_report}), flush=True)
        sys.stdin.readline()
    data.close()


def run_setting(name: str, server_hosts: list, trainer, root: Path, args: argparse.Namespace,
                counted: list, cache: float = 0.0) -> list[dict]:
    """Serves part K on ``server_hosts[K]``, runs the worker on ``trainer``;
    returns its rows with the bytes every host in ``counted`` sent."""
    from support.multihost import read_line

    procs = []
    servers = ",".join(f"{h.address}:{5555 + k}" for k, h in enumerate(server_hosts))
    peers = ["--peers", servers] if args.server_hops else []
    for k, host in enumerate(server_hosts):
        procs.append(host.popen(
            [sys.executable, "-m", "pyg_dist", "serve", str(root), "--part", str(k),
             "--bind", f"{host.address}:{5555 + k}", *peers], stdout=subprocess.PIPE))
    for proc in procs:
        read_line(proc, "ready ", 300)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
           *sys.argv[1:], "--cache-now", str(cache)]
    env = {"PYG_DIST_SERVERS": servers, "PYG_DIST_SHARED_MEMORY_BYTES": "0"}
    proc = trainer.popen(cmd, env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    rows = []
    try:
        for _ in sorted({0, args.prefetch}):
            start = json.loads(read_line(proc, "{", 600))
            before = sum(counter() for counter in counted)
            proc.stdin.write("\n")
            proc.stdin.flush()
            done = json.loads(read_line(proc, "{", 600))
            sent = sum(counter() for counter in counted) - before
            rows.append({"setting": name, "prefetch": start["prefetch"], "cache": cache,
                         "seeds_per_s": done["seeds"] / done["seconds"],
                         "bytes_per_seed": sent / done["all_seeds"], **done["cache"]})
            print(f"{name:<9} cache={cache} prefetch={start['prefetch']}: "
                  f"{rows[-1]['seeds_per_s']:>9,.0f} seeds/s "
                  f"{rows[-1]['bytes_per_seed']:>9,.0f} bytes/seed on the wire", flush=True)
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.wait(120)
    finally:
        for host in {*server_hosts, trainer}:
            host.stop_all()
            host.processes.clear()
    return rows


def lo_bytes(host) -> int:
    out = subprocess.run(["ip", "-n", host.netns, "-s", "link", "show", "lo"],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    tx = next(i for i, line in enumerate(out) if line.strip().startswith("TX:"))
    return int(out[tx + 1].split()[0])


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    sys.path.insert(0, str(REPO / "tests"))
    from support.hosts import missing_requirements, sim_network

    from pyg_dist.datasets import fake, power_law
    from pyg_dist.partitioning.writer import partition

    reason = missing_requirements()
    if reason:
        sys.exit(f"bench_hosts: {reason}")
    if args.graph == "power-law":
        data = power_law(args.num_nodes, int(args.num_nodes * args.avg_degree / 2),
                         args.channels, seed=args.seed)
    else:
        data = fake(num_nodes=args.num_nodes, avg_degree=args.avg_degree,
                    num_channels=args.channels, seed=args.seed)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges, x "
          f"{tuple(data.x.shape)}; fan-out {args.fanout}, batch {args.batch_size}, 2 parts, "
          f"{args.batches} timed batches; "
          f"{'server hops' if args.server_hops else 'every hop from the trainer'}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-hosts-") as tmp:
        root = Path(tmp) / "parts"
        partition(data, 2, root)
        for cache in args.cache:
            with sim_network(["solo"]) as (solo,):
                rows += run_setting("loopback", [solo, solo], solo, root, args,
                                    [lambda: lo_bytes(solo)], cache)
            for rate in args.rates:
                with sim_network(["server0", "server1", "trainer"], rate=rate) as hosts:
                    rows += run_setting(rate, hosts[:2], hosts[2], root, args,
                                        [h.bytes_sent for h in hosts], cache)
    base = {(r["prefetch"], r["cache"]): r["seeds_per_s"] for r in rows
            if r["setting"] == "loopback"}
    uncached = {(r["setting"], r["prefetch"]): r["seeds_per_s"] for r in rows if not r["cache"]}
    print("\n| link | cache | prefetch | seeds/s | x loopback | x uncached | bytes/seed on the "
          "wire | hit rate | cache start-up |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        plain = uncached.get((r["setting"], r["prefetch"]))
        vs_plain = f"{r['seeds_per_s'] / plain:.2f}x" if plain else "-"
        print(f"| {r['setting']} | {r['cache']:g} | {r['prefetch']} | {r['seeds_per_s']:,.0f} | "
              f"{r['seeds_per_s'] / base[(r['prefetch'], r['cache'])]:.2f}x | {vs_plain} | "
              f"{r['bytes_per_seed']:,.0f} | {r.get('hit_rate', 0):.2f} | "
              f"{r.get('startup_s', 0):.2f} s |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
