"""Benchmark: partition a synthetic papers100M-shaped graph from files under a
memory limit (``pyg-dist partition --from``), per partitioner.

Not a test: it prints one JSON row per partitioner. The graph is
ogbn-papers100M's shape scaled by ``--scale`` (111M nodes, 1.6B directed
edges and 128 float32 features at 1; the issue's target is 1/4): power-law
out-degrees (Zipf sources) and locality (70% of edges stay inside blocks of
1,024 consecutive ids, the rest uniform), 1% training nodes. It is written in
bounded memory to ``DIR/edges/*.parquet`` and ``DIR/nodes/{x,y,train_mask}.npy``.
Each partitioner then runs in its own process,
``python -m pyg_dist partition --from DIR ROOT --memory-limit LIMIT``, and
the row reports its wall time, its CPU time (user + system, all its
processes), its peak RSS (``VmHWM`` of that child), bytes written, the edge
cut (from ``meta.json``) and edges/s, with the load average beside them.

With ``--ranks 2,...`` each partitioner runs again under ``torchrun
--nproc-per-node N --standalone`` with ``--distributed`` (N ranks on this
host over loopback, each with ``--memory-limit``; the row's peak is the
largest rank's): a stand-in for N hosts that shares this machine's cores and
disk.

Usage::

    .venv/bin/python benchmarks/bench_partition_files.py [--scale 0.005] \\
        [--parts 8] [--memory-limit 4G] [--partitioners hash,streaming,random] \\
        [--ranks 2] [-o passes=2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PAPERS_NODES, PAPERS_EDGES, FEATURES = 111_059_956, 1_615_685_872, 128
BLOCK = 1024
LOCAL = 0.7


def generate(out: Path, num_nodes: int, num_edges: int, features: int, seed: int = 0) -> int:
    """Writes the graph in chunks; returns the input's bytes (edges + x)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    (out / "edges").mkdir(parents=True)
    (out / "nodes").mkdir()
    # Zipf-like source weights over a random order of the nodes.
    weights = 1.0 / np.arange(1, num_nodes + 1) ** 0.8
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    order = rng.permutation(num_nodes)
    del weights
    # At least 16 shards (of 1M-32M edges): ranks of a --distributed run
    # each read a range of them.
    chunk = 1 << 22
    shard_edges = min(1 << 25, max(1 << 20, num_edges // 16))
    schema = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
    writer, written = None, 0
    for start in range(0, num_edges, chunk):
        n = min(chunk, num_edges - start)
        if writer is None or written >= shard_edges:
            if writer is not None:
                writer.close()
            writer = pq.ParquetWriter(out / "edges" / f"part-{start // shard_edges:05d}.parquet",
                                      schema)
            written = 0
        src = order[np.minimum(np.searchsorted(cdf, rng.random(n)), num_nodes - 1)]
        local = (src // BLOCK) * BLOCK + rng.integers(0, BLOCK, n)
        dst = np.where(rng.random(n) < LOCAL, np.minimum(local, num_nodes - 1),
                       rng.integers(0, num_nodes, n))
        writer.write_table(pa.table({"src": src, "dst": dst}), row_group_size=1 << 18)
        written += n
    writer.close()
    with open(out / "nodes" / "x.npy", "wb") as f:
        np.lib.format.write_array_header_2_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (num_nodes, features)})
        for start in range(0, num_nodes, 1 << 16):
            f.write(rng.standard_normal((min(1 << 16, num_nodes - start), features),
                                        dtype=np.float32).tobytes())
    np.save(out / "nodes" / "y.npy", rng.integers(0, 172, num_nodes))
    np.save(out / "nodes" / "train_mask.npy", rng.random(num_nodes) < 0.01)
    return num_edges * 16 + num_nodes * features * 4


def reuse_or_generate(out: Path, num_nodes: int, num_edges: int) -> int:
    """The input's bytes; generates it unless ``out`` holds the same graph
    from an earlier run with the same ``--dir`` (its shape in ``shape.json``,
    written last, so an interrupted generation is made again)."""
    shape = {"nodes": num_nodes, "edges": num_edges, "features": FEATURES}
    marker = out / "shape.json"
    if marker.exists() and json.loads(marker.read_text()) == shape:
        return num_edges * 16 + num_nodes * FEATURES * 4
    shutil.rmtree(out, ignore_errors=True)
    size = generate(out, num_nodes, num_edges, FEATURES)
    marker.write_text(json.dumps(shape))
    return size


# The CLI, then the child's own peak RSS on stderr: VmHWM, the high-water mark
# of its address space. (ru_maxrss would do no good: Linux carries it over
# exec from the forking parent, whose generation arrays would count.)
# Each rank writes its peak to PEAK_DIR/rank-RANK (torchrun shows rank 0's
# output only).
_CHILD = ("import os, sys\nfrom pyg_dist.cli import main\nrc = main(sys.argv[1:])\n"
          "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
          "path = os.path.join(os.environ['PEAK_DIR'], 'rank-' + os.environ.get('RANK', '0'))\n"
          "open(path, 'w').write(hwm.split()[1])\nsys.exit(rc)")


def run_one(source: Path, root: Path, partitioner: str, parts: int, limit: str,
            ranks: int = 1, options: tuple[str, ...] = ()) -> dict:
    """Partitions in a child process (or ``ranks`` torchrun ranks); its wall
    time, peak RSS (the largest rank's) and results."""
    peaks = root.parent / f"peaks-{root.name}"
    shutil.rmtree(peaks, ignore_errors=True)
    peaks.mkdir()
    script = peaks / "child.py"
    script.write_text(_CHILD)
    launcher = [sys.executable] if ranks == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
        "--standalone"]
    extra = ["--distributed"] if ranks > 1 else []
    start = time.perf_counter()
    cpu_before = _children_cpu()
    done = subprocess.run(
        [*launcher, str(script), "partition", "--from", str(source), str(root),
         "-n", str(parts), "-p", partitioner, "--memory-limit", limit, "--no-progress",
         "--overwrite", *extra, *(a for o in options for a in ("-o", o))],
        capture_output=True, text=True,
        env=dict(os.environ, PEAK_DIR=str(peaks)))
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu_before
    if done.returncode != 0:
        return {"partitioner": partitioner, "ranks": ranks,
                "error": done.stderr.strip()[-500:]}
    peak = max(int(p.read_text()) for p in peaks.glob("rank-*")) * 1024
    shutil.rmtree(peaks)
    meta = json.loads((root / "meta.json").read_text())
    written = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return {"partitioner": partitioner, "ranks": ranks, "wall_s": round(wall, 1),
            "peak_rss_mb": round(peak / 2**20, 1), "bytes_written": written,
            "edge_cut_fraction": round(meta["stats"]["edge_cut_fraction"], 4),
            "node_balance": round(meta["stats"]["node_balance"], 3),
            "edges_per_s": round(meta["num_edges"] / wall),
            "cpu_s": round(cpu, 1), "load_avg": os.getloadavg()[0]}


def _children_cpu() -> float:
    """User + system CPU seconds of the children waited for so far: beside
    the wall, a figure that other work on the same cores does not inflate
    (much)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    """Generates the graph, partitions it with each partitioner, prints JSON rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.005,
                        help="fraction of ogbn-papers100M (the issue's target: 0.25)")
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--memory-limit", default="4G")
    parser.add_argument("--partitioners", default="hash,streaming,random")
    parser.add_argument("--ranks", default="",
                        help="also run each partitioner with these numbers of torchrun ranks "
                             "(--distributed), e.g. 2")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                        help="partitioner option passed on to every run (pyg-dist partition "
                             "-o), e.g. passes=2")
    parser.add_argument("--dir", help="work directory (default: a temporary one, removed); "
                                      "its input graph is kept and reused by later runs of "
                                      "the same scale")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-partition-files-"))
    try:
        nodes, edges = int(PAPERS_NODES * args.scale), int(PAPERS_EDGES * args.scale)
        started = time.perf_counter()
        size = reuse_or_generate(work / "input", nodes, edges)
        print(json.dumps({"generated": {"nodes": nodes, "edges": edges, "features": FEATURES,
                                        "input_bytes": size, "scale": args.scale,
                                        "seconds": round(time.perf_counter() - started, 1)}}),
              flush=True)
        ranks = [1] + [int(r) for r in args.ranks.split(",") if r]
        for name in args.partitioners.split(","):
            for n in ranks:
                row = run_one(work / "input", work / f"out-{name}", name, args.parts,
                              args.memory_limit, n, tuple(args.option))
                row.update(scale=args.scale, parts=args.parts, memory_limit=args.memory_limit,
                           options=args.option)
                print(json.dumps(row), flush=True)
                shutil.rmtree(work / f"out-{name}", ignore_errors=True)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
