"""Benchmark: train on a graph partitioned from files, its parts served by
simulated hosts through the mmap stores, each host held to a memory limit.

    sudo .venv/bin/python benchmarks/bench_train_out_of_core.py             # scale 0.005
    sudo .venv/bin/python benchmarks/bench_train_out_of_core.py --scale 0.02 --host-memory 640M

Needs root (network namespaces from ``tests/support/hosts.py`` and cgroup-v1
memory groups), so run it from a checkout. Not a test: it prints JSON rows.

1. **generate**: the papers100M-shaped graph of ``bench_partition_files.py``
   at ``--scale`` (power-law sources, block locality, 128 float32 features,
   1% training nodes), written in chunks to ``DIR/edges/*.parquet`` and
   ``DIR/nodes/*.npy``;
2. **partition**: ``pyg-dist partition --from DIR ROOT`` under
   ``--partition-memory``, in a child process (its peak RSS in the row);
3. **serve**: part ``k`` on simulated host ``k`` (its own network namespace
   and address), ``pyg-dist serve --feature-store mmap --graph-store mmap``
   with the other hosts as ``--peers``, inside a memory cgroup whose limit is
   ``--host-memory`` (the server's own memory and the page cache of the
   part's files it maps, which the kernel reclaims under the limit);
4. **train**: a trainer on one more host runs ``--epochs`` GraphSAGE epochs
   over the training nodes with ``DistNeighborLoader`` (prefetch, server
   hops) and prints its seeds/s and loss.

Each server host's row: the limit, the part's bytes on disk (bigger than the
limit's room is the point), the cgroup's peak usage (``memory.max_usage_in_
bytes``: charged memory, page cache included, never above the limit), how
often it hit the limit (``memory.failcnt``: reclaim at the limit, not
failure) and whether the kernel OOM-killed anything in it (``oom_kill`` in
``memory.oom_control``); the server's own peak anonymous memory is not in
these counters' past, so its ``RssAnon`` at the end is reported beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.005,
                   help="fraction of ogbn-papers100M's nodes and edges (issue 27: 0.25)")
    p.add_argument("--parts", type=int, default=4, help="parts, one server host each")
    p.add_argument("--partitioner", default="streaming")
    p.add_argument("--partition-memory", default="1G",
                   help="pyg-dist partition --memory-limit")
    p.add_argument("--host-memory", default="512M",
                   help="memory limit of each server host (its cgroup)")
    p.add_argument("--fanout", type=int, nargs="+", default=[15, 10])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--dir", help="work directory, kept: a later run with the same --dir reuses "
                   "its input and its parts when their shape matches (default: a temporary "
                   "directory, removed)")
    p.add_argument("--seed", type=int, default=0)
    # Internal: the trainer, run inside its simulated host.
    p.add_argument("--trainer", metavar="SOURCE", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def size_bytes(text: str) -> int:
    """``512M``, ``4G``, ``100000`` as bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def trainer(args: argparse.Namespace) -> None:
    """Trains over ``PYG_DIST_SERVERS``; one JSON line per epoch."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE
    from tqdm import tqdm

    import pyg_dist

    seeds = torch.from_numpy(np.flatnonzero(np.load(Path(args.trainer) / "nodes" /
                                                    "train_mask.npy", mmap_mode="r")))
    fs, gs = pyg_dist.RemoteData()
    num_classes = 172  # bench_partition_files' labels
    torch.manual_seed(args.seed)
    model = GraphSAGE(128, 256, num_layers=len(args.fanout), out_channels=num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = pyg_dist.DistNeighborLoader(
        (fs, gs), num_neighbors=args.fanout, input_nodes=seeds, batch_size=args.batch_size,
        shuffle=True, prefetch=args.prefetch, server_hops=True, seed=args.seed)
    for epoch in range(args.epochs):
        start, done, loss_sum, batches = time.perf_counter(), 0, 0.0, 0
        # A 1/4-scale epoch takes ~15 minutes: a bar on stderr (stdout carries
        # the JSON rows the parent reads).
        for batch in tqdm(loader, desc=f"epoch {epoch}", unit="batch", file=sys.stderr,
                          mininterval=10):
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size].long())
            loss.backward()
            opt.step()
            done += int(batch.batch_size)
            loss_sum += float(loss.detach())
            batches += 1
        seconds = time.perf_counter() - start
        print(json.dumps({"row": "epoch", "epoch": epoch, "seeds": done, "batches": batches,
                          "seconds": round(seconds, 2), "seeds_per_s": round(done / seconds, 1),
                          "mean_loss": round(loss_sum / max(1, batches), 4)}), flush=True)
    fs.close()


@contextmanager
def memory_group(name: str, limit: int) -> Iterator[Path]:
    """A cgroup-v1 memory group below this process's own, limited to
    ``limit`` bytes; removed afterwards (its processes must be gone)."""
    own = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup")
               if line.split(":")[1] == "memory")
    path = MEMORY_CGROUP / own.lstrip("/") / name
    path.mkdir()
    try:
        (path / "memory.limit_in_bytes").write_text(str(limit))
        yield path
    finally:
        for _ in range(50):  # the kernel lets go of an exited task's group lazily
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def group_report(path: Path) -> dict:
    """The group's peak usage, limit hits and OOM kills."""
    oom = dict(line.split() for line in (path / "memory.oom_control").read_text().splitlines())
    return {"peak_usage_mb": round(int((path / "memory.max_usage_in_bytes").read_text())
                                   / 2**20, 1),
            "limit_hits": int((path / "memory.failcnt").read_text()),
            "oom_kills": int(oom.get("oom_kill", 0))}


def evict_page_cache(root: Path) -> None:
    """Drops the part files' pages from the page cache: the partitioner
    wrote them, and pages already cached stay charged to its group, not to
    the servers' that map them."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def rss_anon_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def serve_and_train(args: argparse.Namespace, source: Path, root: Path) -> list[dict]:
    """Serves the parts on simulated hosts in memory groups and trains."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.hosts import sim_network
    from support.multihost import read_line

    limit = size_bytes(args.host_memory)
    evict_page_cache(root)
    names = [f"server{k}" for k in range(args.parts)] + ["trainer"]
    rows = []
    with sim_network(names) as hosts, ExitStack() as stack:
        servers = ",".join(f"{h.address}:{5555 + k}" for k, h in enumerate(hosts[:-1]))
        groups, procs = [], []
        for k, host in enumerate(hosts[:-1]):
            group = stack.enter_context(memory_group(f"pyg-dist-bench-host{k}-{os.getpid()}",
                                                     limit))
            groups.append(group)
            # The shell waits until it is in the group (a namespace's /sys
            # has no cgroup file system to join it from inside), then becomes
            # the server: everything the server maps or allocates is charged
            # to the group.
            serve = (f"read go && exec {sys.executable} -m pyg_dist serve {root} --part {k} "
                     f"--bind {host.address}:{5555 + k} --peers {servers} "
                     f"--feature-store mmap --graph-store mmap")
            proc = host.popen(["sh", "-c", serve], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
            stack.callback(host.stop_all)
            (group / "cgroup.procs").write_text(str(proc.pid))
            proc.stdin.write("go\n")
            proc.stdin.close()
            procs.append(proc)
        for proc in procs:
            read_line(proc, "ready ", 600)
        cmd = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:],
               "--trainer", str(source)]
        train = hosts[-1].popen(cmd, {"PYG_DIST_SERVERS": servers}, stdout=subprocess.PIPE)
        stack.callback(hosts[-1].stop_all)
        for _ in range(args.epochs):
            rows.append(json.loads(read_line(train, "{", 3600)))
            print(json.dumps(rows[-1]), flush=True)
        train.wait(120)
        for k, (group, proc) in enumerate(zip(groups, procs)):
            part_bytes = sum(p.stat().st_size for p in (root / f"part-{k}").rglob("*")
                             if p.is_file())
            rows.append({"row": "server host", "part": k, "limit_mb": round(limit / 2**20),
                         "part_on_disk_mb": round(part_bytes / 2**20, 1),
                         "server_rss_anon_mb_at_end": rss_anon_mb(proc.pid),
                         "alive": proc.poll() is None, **group_report(group)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    args = parse_args()
    if args.trainer:
        trainer(args)
        return
    sys.path.insert(0, str(REPO / "tests"))
    import bench_partition_files as files
    from support.hosts import missing_requirements

    reason = missing_requirements()
    if reason or not MEMORY_CGROUP.is_dir():
        sys.exit(f"bench_train_out_of_core: {reason or 'no cgroup-v1 memory controller'}")
    with ExitStack() as stack:
        work = (Path(args.dir) if args.dir else
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pyg-dist-ooc-"))))
        source, root = work / "input", work / "parts"
        nodes = int(files.PAPERS_NODES * args.scale)
        edges = int(files.PAPERS_EDGES * args.scale)
        start = time.perf_counter()
        input_bytes = files.reuse_or_generate(source, nodes, edges)
        print(json.dumps({"row": "generate", "nodes": nodes, "edges": edges,
                          "input_mb": round(input_bytes / 2**20, 1),
                          "seconds": round(time.perf_counter() - start, 1)}), flush=True)
        # The parts are reused when the same partitioning of the same input
        # made them (the marker is written last, so a partial run is redone).
        marker = work / "parts.json"
        made_by = {"nodes": nodes, "edges": edges, "partitioner": args.partitioner,
                   "parts": args.parts}
        if not (marker.exists() and json.loads(marker.read_text()) == made_by):
            marker.unlink(missing_ok=True)
            made = files.run_one(source, root, args.partitioner, args.parts,
                                 args.partition_memory)
            print(json.dumps({"row": "partition", **made}), flush=True)
            if "error" in made:
                sys.exit(1)
            marker.write_text(json.dumps(made_by))
        serve_and_train(args, source, root)
    print(json.dumps({"row": "load", "load_avg": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
