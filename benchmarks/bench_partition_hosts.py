"""Benchmark: ``pyg-dist partition --from DIR ROOT --distributed`` on
simulated hosts, against one host.

    sudo .venv/bin/python benchmarks/bench_partition_hosts.py [--scale 0.002] \\
        [--hosts 2] [--parts 8] [--memory-limit 512M] [--partitioners hash,streaming]

Needs root (network namespaces; ``tests/support/hosts.py`` builds them, so
run it from a checkout). Generates the papers100M-shaped graph of
``bench_partition_files.py`` at ``--scale``, then per partitioner:

* ``hosts=1``: one process, ``pyg-dist partition --from`` (no torchrun);
* ``hosts=N``: N network namespaces on a veth bridge, each its own host
  name (``unshare --uts``) and address, each running ``torchrun --nnodes N
  --nproc-per-node 1 --node-rank I`` with ``GLOO_SOCKET_IFNAME=eth0``, so
  every byte between the ranks crosses a veth link; each host writes its own
  ROOT (as hosts with file systems of their own do).

Each row: wall time (until every host is done), the largest peak RSS of a
rank (``VmHWM``), the edge cut and node balance from ``meta.json``, the bytes
each host sent over its link, and the load average. The hosts share this
machine's cores, disk and page cache: the rows say that the exchange works
between hosts and what it sends, not what separate machines would gain.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

from bench_partition_files import (  # noqa: E402 - after the path above
    _CHILD,
    FEATURES,
    PAPERS_EDGES,
    PAPERS_NODES,
    generate,
)


def _summary(root: Path, peaks: Path) -> dict:
    meta = json.loads((root / "meta.json").read_text())
    return {"peak_rss_mb": round(max(int(p.read_text()) for p in peaks.glob("rank-*"))
                                 / 1024, 1),
            "edge_cut_fraction": round(meta["stats"]["edge_cut_fraction"], 4),
            "node_balance": round(meta["stats"]["node_balance"], 3)}


def _cli(source: Path, root: Path, partitioner: str, args: argparse.Namespace) -> list[str]:
    return ["partition", "--from", str(source), str(root), "-n", str(args.parts), "-p",
            partitioner, "--memory-limit", args.memory_limit, "--no-progress", "--overwrite"]


def one_host(source: Path, work: Path, partitioner: str, args: argparse.Namespace) -> dict:
    """One process on this host."""
    peaks = work / "peaks-1"
    shutil.rmtree(peaks, ignore_errors=True)
    peaks.mkdir()
    (peaks / "child.py").write_text(_CHILD)
    root = work / "out-1"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(peaks / "child.py"),
                           *_cli(source, root, partitioner, args)],
                          capture_output=True, text=True, env=dict(os.environ, PEAK_DIR=str(peaks)))
    wall = time.perf_counter() - start
    if done.returncode != 0:
        return {"hosts": 1, "error": done.stderr.strip()[-800:]}
    row = {"hosts": 1, "wall_s": round(wall, 1), **_summary(root, peaks)}
    shutil.rmtree(root)
    return row


def many_hosts(source: Path, work: Path, partitioner: str, args: argparse.Namespace) -> dict:
    """``args.hosts`` simulated hosts, a torchrun node each."""
    from support.hosts import sim_network

    peaks = work / f"peaks-{args.hosts}"
    shutil.rmtree(peaks, ignore_errors=True)
    peaks.mkdir()
    (peaks / "child.py").write_text(_CHILD)
    names = [f"phost{i}" for i in range(args.hosts)]
    with sim_network(names) as hosts:
        sent = [h.bytes_sent() for h in hosts]
        start = time.perf_counter()
        procs = [host.popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(args.hosts),
             "--nproc-per-node", "1", "--node-rank", str(i), "--master-addr",
             hosts[0].address, "--master-port", "29561", str(peaks / "child.py"),
             *_cli(source, work / f"out-{host.name}", partitioner, args), "--distributed"],
            env={"PEAK_DIR": str(peaks), "PYTHONWARNINGS": "ignore"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i, host in enumerate(hosts)]
        outs = [p.communicate(timeout=args.timeout) for p in procs]
        wall = time.perf_counter() - start
        sent = [h.bytes_sent() - s for h, s in zip(hosts, sent)]
    if any(p.returncode for p in procs):
        return {"hosts": args.hosts, "error": " | ".join(e.strip()[-600:] for _, e in outs)}
    # Every host wrote the books and meta.json, the parts it serves beside them.
    row = {"hosts": args.hosts, "wall_s": round(wall, 1),
           **_summary(work / f"out-{names[0]}", peaks),
           "bytes_sent_per_host_mb": [round(b / 2**20, 1) for b in sent]}
    for name in names:
        shutil.rmtree(work / f"out-{name}", ignore_errors=True)
    return row


def main() -> None:
    """Generates the graph, partitions it on one host and on simulated hosts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.002)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--memory-limit", default="512M")
    parser.add_argument("--partitioners", default="hash,streaming")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    from support.hosts import missing_requirements

    reason = missing_requirements()
    if reason:
        sys.exit(reason)
    # `ip netns exec` keeps the mount namespace: every host sees this directory.
    work = Path(tempfile.mkdtemp(prefix="bench-partition-hosts-"))
    try:
        nodes, edges = int(PAPERS_NODES * args.scale), int(PAPERS_EDGES * args.scale)
        size = generate(work / "input", nodes, edges, FEATURES)
        print(json.dumps({"generated": {"nodes": nodes, "edges": edges, "features": FEATURES,
                                        "input_bytes": size, "scale": args.scale}}), flush=True)
        for name in args.partitioners.split(","):
            for run in (one_host, many_hosts):
                row = {"partitioner": name, **run(work / "input", work, name, args),
                       "parts": args.parts, "memory_limit": args.memory_limit,
                       "load_avg": round(os.getloadavg()[0], 2)}
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
