"""The server's sampling kernels: uniform against weighted and temporal, per sampled edge.

Not a test: it prints figures. Run::

    .venv/bin/python benchmarks/bench_kernels.py            # the bench graph
    .venv/bin/python benchmarks/bench_kernels.py --quick    # a smaller one

On the graph of ``pyg-dist bench`` (100k nodes, ~2M edges: 10 random
out-edges per node, symmetrised), one hop of a batch's sampling is timed
for every kernel over the same seeds: the first hop of a 1,024-seed batch
and the second (the ~15k nodes the first hop reached), at the fan-outs of
the bench ([15, 10]). Weights are uniform in [0, 1) with 10% zeros; times
are uniform over the edges and every seed's time is the median, so half of
every neighbourhood lies in its future. Each row gives microseconds per
call and nanoseconds per sampled edge (the issue's yardstick: weighted and
temporal at most 2x uniform), the median of ``--repeats`` calls, the
kernels' calls interleaved (one call of each in turn) and ``x uniform`` the
median of the ratios within a round, so that the ratios hold on a loaded
machine. The
``sorted`` rows are the way a server samples temporally (the unsorted
temporal kernel, which narrowed every segment to its past on every call,
was removed with its rows after issue 26: no server used it): its CSC sorted by
time within every destination once (:func:`sort_by_time`), every seed's
past a prefix found by binary search (``temporal weighted`` draws by weight
among the past). Likewise ``weighted, replace`` is the server's way: alias
tables over the CSC's columns built once (:func:`build_alias_table`), O(1)
a draw; ``weighted, replace, per call`` is the kernel without them (running
sums of every segment on every call, what draws over a part of a column,
such as a seed's past, still do).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from pyg_dist.kernels import (
    AliasTable,
    build_alias_table,
    sample_segments,
    sample_time_sorted,
    sample_weighted_segments,
    sort_by_time,
)


def _graph(num_nodes: int, avg_degree: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """colptr and row of a random symmetrised graph (CSC by destination)."""
    gen = torch.Generator().manual_seed(seed)
    num_edges = int(num_nodes * avg_degree)
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    src, dst = torch.cat([src, dst]), torch.cat([dst, src])
    order = torch.argsort(dst * num_nodes + src)
    row, col = src[order], dst[order]
    colptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    colptr[1:] = torch.cumsum(torch.bincount(col, minlength=num_nodes), 0)
    return colptr, row


def _time_all(fns: dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]], repeats: int
              ) -> dict[str, tuple[list[float], int]]:
    """Seconds of every call of every kernel, and the edges one call
    samples. The calls go round-robin (every kernel once, ``repeats``
    times), so that on a shared machine the kernels of one round meet the
    same load and their ratios hold even when the absolute times move."""
    edges = {name: int(fn()[0].sum()) for name, fn in fns.items()}  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            began = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - began)
    return {name: (s, edges[name]) for name, s in seconds.items()}


def _kernels(start: torch.Tensor, deg: torch.Tensor, k: int, weight: torch.Tensor,
             seed_time: torch.Tensor,
             gen: torch.Generator, by_time: tuple[torch.Tensor, torch.Tensor],
             alias: AliasTable) -> dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]]:
    """One call of every kernel over the same segments, by row name.
    ``by_time``: ``(perm, sorted_time)`` of the whole CSC, the layout a
    server sorts once per time attribute; ``alias``: the alias tables of
    ``weight``, which a server builds once per weight attribute."""
    perm, sorted_time = by_time
    sorted_weight = weight[perm]

    def weighted(replace: bool, table: AliasTable = None) -> tuple[torch.Tensor, torch.Tensor]:
        return sample_weighted_segments(start, deg, weight, k, replace, gen, alias=table)

    return {
        "uniform": lambda: sample_segments(start, deg, k, False, gen),
        "uniform, replace": lambda: sample_segments(start, deg, k, True, gen),
        "weighted": lambda: weighted(False),
        "weighted, replace": lambda: weighted(True, alias),
        "weighted, replace, per call": lambda: weighted(True),
        # Segments sorted by time once, pasts are prefixes (the server's way).
        "temporal uniform, sorted": lambda: sample_time_sorted(
            start, deg, sorted_time, perm, seed_time, k, "uniform", generator=gen),
        "temporal weighted, sorted": lambda: sample_time_sorted(
            start, deg, sorted_time, perm, seed_time, k, "uniform",
            sorted_weight=sorted_weight, generator=gen),
        "temporal last, sorted": lambda: sample_time_sorted(
            start, deg, sorted_time, perm, seed_time, k, "last"),
    }


def main() -> None:
    """Prints the kernel table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=100_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--num-neighbors", default="15,10")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (a server runs one request per worker thread)")
    p.add_argument("--quick", action="store_true", help="20k nodes, 10 repeats")
    args = p.parse_args()
    if args.quick:
        args.num_nodes, args.repeats = 20_000, 10
    torch.set_num_threads(args.threads)
    colptr, row = _graph(args.num_nodes, args.avg_degree, seed=0)
    num_edges = int(colptr[-1])
    gen = torch.Generator().manual_seed(1)
    weight = torch.rand(num_edges, generator=gen)
    weight[torch.rand(num_edges, generator=gen) < 0.1] = 0
    entry_time = torch.randint(0, 1_000_000, (num_edges,), generator=gen)
    fanouts = [int(k) for k in args.num_neighbors.split(",")]
    seeds = torch.randperm(args.num_nodes, generator=gen)[:args.batch_size]
    began = time.perf_counter()
    by_time = sort_by_time(colptr.diff(), entry_time)
    sort_seconds = time.perf_counter() - began
    began = time.perf_counter()
    alias = build_alias_table(colptr.diff(), weight)
    alias_seconds = time.perf_counter() - began

    print(f"graph: {args.num_nodes:,} nodes, {num_edges:,} CSC entries; "
          f"torch threads {args.threads}; median of {args.repeats} calls; sorting the CSC "
          f"by time once: {sort_seconds * 1e3:.0f} ms; alias tables once: "
          f"{alias_seconds * 1e3:.0f} ms")
    print(f"{'hop':>3} {'seeds':>7} {'k':>3}  {'kernel':<27} {'us/call':>9} "
          f"{'edges':>8} {'ns/edge':>8} {'x uniform':>9}")
    for hop, k in enumerate(fanouts):
        start = colptr[seeds]
        deg = colptr[seeds + 1] - start
        seed_time = torch.full((seeds.numel(),), 500_000, dtype=torch.long)
        rows = _kernels(start, deg, k, weight, seed_time, gen, by_time, alias)
        timed = _time_all(rows, args.repeats)
        for name, (seconds, edges) in timed.items():
            # x uniform: the median over rounds of this kernel's time per
            # edge over the uniform kernel's (same replacement mode) in the
            # same round, robust to load that changes between rounds.
            ref_seconds, ref_edges = timed["uniform, replace" if "replace" in name else "uniform"]
            ratio = statistics.median(a / max(edges, 1) / (b / max(ref_edges, 1))
                                      for a, b in zip(seconds, ref_seconds))
            median = statistics.median(seconds)
            print(f"{hop + 1:>3} {seeds.numel():>7,} {k:>3}  {name:<27} {median * 1e6:>9.0f} "
                  f"{edges:>8,} {median / max(edges, 1) * 1e9:>8.1f} {ratio:>9.2f}")
        # The next hop's seeds: the distinct nodes this hop reached (drawn
        # with a generator of their own, so that the frontier does not
        # depend on what the kernels above drew).
        _, positions = sample_segments(start, deg, k, False,
                                       torch.Generator().manual_seed(2 + hop))
        seeds = torch.unique(row[positions])


if __name__ == "__main__":
    main()
