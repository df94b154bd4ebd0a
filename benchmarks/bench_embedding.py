"""Training with a DistEmbedding versus served fixed features of the same size: seeds/s.

    .venv/bin/python benchmarks/bench_embedding.py                 # ~50k nodes, dim 64
    .venv/bin/python benchmarks/bench_embedding.py --num-nodes 20000 --rounds 3

Builds a FakeDataset-style graph (``pyg_dist.datasets.fake``) twice: once
with a fixed float32 ``x`` of ``--dim`` columns per node, once without ``x``.
Each is partitioned into ``--parts`` parts and served by ``pyg-dist serve``
processes on loopback. The same training step (a two-layer GraphSAGE, dense
Adam) runs over ``DistNeighborLoader`` batches with the same seeds, fan-out
and batch size:

* ``fixed``: the batch's ``x`` (served features);
* ``fixed + input gradient``: the same, with the gradient of the loss
  computed back to ``x`` (what learning any input costs the model's
  backward, whoever holds the rows);
* ``embedding, staleness k``: the batch's rows of a ``pyg_dist.DistEmbedding``
  of ``--dim`` columns served as the attribute ``emb`` (read with autograd),
  updated on the servers by ``pyg_dist.optim.SparseAdam`` every step.

The runs are interleaved: every round times ``--steps`` steps of each in
turn, so that a machine whose load swings (a shared CI host) slows all of
them alike. Prints one line per run and a JSON line with the rates, the
ratios (embedding / fixed, and embedding / fixed with input gradient,
seeds/s), the CPU milliseconds per step of the trainer process and of the
server processes together (what a step costs the machine, which a loaded
host's wall clock hides), and the load average. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from typing import Any, Optional

import torch


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=50_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5, help="rounds of timed steps")
    p.add_argument("--steps", type=int, default=4, help="timed steps per run and round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per run")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--staleness", type=int, nargs="+", default=[0, 1],
                   help="DistEmbedding staleness values to time (0: reads wait for every "
                        "push; 1: a step's pushes overlap the next batch)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


class Run:
    """One configuration's loader, model and optimisers, stepped on demand."""

    def __init__(self, name: str, stores: tuple, attr: str, args: argparse.Namespace,
                 seeds: torch.Tensor, num_classes: int,
                 embedding: Optional[Any] = None, input_grad: bool = False,
                 servers: Optional[list[int]] = None) -> None:
        from torch_geometric.nn.models import GraphSAGE

        import pyg_dist

        torch.manual_seed(args.seed)
        self.name, self.attr, self.seconds, self.seeds = name, attr, 0.0, 0
        self.input_grad = input_grad
        self.servers = servers or []  # pids of the server processes it uses
        self.timed_steps, self.trainer_cpu, self.server_cpu = 0, 0.0, 0.0
        self.model = GraphSAGE(args.dim, 64, num_layers=len(args.fanout),
                               out_channels=num_classes)
        self.optimizers: list[Any] = [torch.optim.Adam(self.model.parameters(), lr=0.01)]
        if embedding is not None:
            self.optimizers.append(pyg_dist.optim.SparseAdam([embedding], lr=0.01))
        loader = pyg_dist.DistNeighborLoader(
            stores, num_neighbors=args.fanout, input_nodes=seeds, batch_size=args.batch_size,
            prefetch=args.prefetch, seed=args.seed)
        self.batches = iter(loader)

    def steps(self, count: int, timed: bool = True) -> None:
        """``count`` training steps (their pushes applied before it returns)."""
        import torch.nn.functional as F

        start, cpu, server_cpu = time.perf_counter(), time.process_time(), \
            processes_cpu(self.servers)
        for _ in range(count):
            batch = next(self.batches)
            for opt in self.optimizers:
                opt.zero_grad()
            x = batch[self.attr]
            if self.input_grad:
                x.requires_grad_(True)
            out = self.model(x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            for opt in self.optimizers:
                opt.step()
            self.seeds += int(batch.batch_size) if timed else 0
        for opt in self.optimizers:  # the last pushes count
            getattr(opt, "flush", lambda: None)()
        if timed:
            self.seconds += time.perf_counter() - start
            self.timed_steps += count
            self.trainer_cpu += time.process_time() - cpu
            self.server_cpu += processes_cpu(self.servers) - server_cpu

    def rate(self) -> float:
        rate = self.seeds / self.seconds
        print(f"{self.name:<34} {rate:>10,.0f} seeds/s ({self.seeds} seeds, "
              f"{self.seconds:.2f}s); CPU per step: trainer {self.cpu_ms()[0]:.1f} ms, "
              f"servers {self.cpu_ms()[1]:.1f} ms", flush=True)
        return rate

    def cpu_ms(self) -> tuple[float, float]:
        """CPU milliseconds per timed step: this process (the trainer, its
        loader's threads included) and this run's servers together, while
        its steps ran. Runs take turns and the others' prefetch queues are
        full meanwhile, so the servers' work in a run's window is that run's
        (its pipeline builds as many batches as it trains on)."""
        steps = max(1, self.timed_steps)
        return 1e3 * self.trainer_cpu / steps, 1e3 * self.server_cpu / steps


def processes_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used so far
    (Linux ``/proc``; 0 elsewhere)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def main() -> None:
    args = parse_args()
    import pyg_dist
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.datasets import fake
    from pyg_dist.partitioning.writer import partition

    data = fake(num_nodes=args.num_nodes, avg_degree=args.avg_degree, num_channels=args.dim,
                seed=args.seed)
    print(f"graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges; fan-out "
          f"{args.fanout}, batch {args.batch_size}, prefetch {args.prefetch}, {args.parts} "
          f"parts on loopback; {args.rounds} rounds of {args.steps} steps each", flush=True)
    total = args.batch_size * (args.rounds * args.steps + args.warmup) * 2
    seeds = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(
        args.seed))[:total]
    bare = data.clone()
    del bare.x
    num_classes = int(data.y.max()) + 1
    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-emb-") as tmp, \
            contextlib.ExitStack() as stack:
        partition(data, args.parts, f"{tmp}/fixed")
        partition(bare, args.parts, f"{tmp}/bare")
        fixed_cluster = stack.enter_context(LocalCluster(f"{tmp}/fixed"))
        fixed_stores = pyg_dist.connect(fixed_cluster.endpoints)
        stack.callback(fixed_stores[0].close)
        bare_cluster = stack.enter_context(LocalCluster(f"{tmp}/bare"))
        bare = bare_cluster.endpoints
        fixed_pids = [p.pid for p in fixed_cluster.processes]
        bare_pids = [p.pid for p in bare_cluster.processes]
        grad_stores = pyg_dist.connect(fixed_stores[0].router.endpoints)
        stack.callback(grad_stores[0].close)
        runs = [Run(f"fixed x dim {args.dim} (served)", fixed_stores, "x", args, seeds,
                    num_classes, servers=fixed_pids),
                Run("fixed x + input gradient", grad_stores, "x", args, seeds, num_classes,
                    input_grad=True, servers=fixed_pids)]
        for k in args.staleness:
            # A connection each: a batch carries every embedding its store serves.
            bare_stores = pyg_dist.connect(bare)
            stack.callback(bare_stores[0].close)
            emb = pyg_dist.DistEmbedding(bare_stores, f"bench{k}", args.dim, init="uniform",
                                         attr_name=f"emb{k}", staleness=k)
            runs.append(Run(f"embedding dim {args.dim}, staleness {k}", bare_stores,
                            f"emb{k}", args, seeds, num_classes, emb, servers=bare_pids))
        for run in runs:
            run.steps(args.warmup, timed=False)
        for _ in range(args.rounds):
            for run in runs:
                run.steps(args.steps)
        rates = [run.rate() for run in runs]
        for run in runs:
            del run.batches  # stops the prefetch pipelines' threads
    print(json.dumps({"fixed_seeds_per_s": round(rates[0], 1),
                      "fixed_input_grad_seeds_per_s": round(rates[1], 1),
                      "embedding_seeds_per_s": {k: round(r, 1)
                                                for k, r in zip(args.staleness, rates[2:])},
                      "ratio": {k: round(r / rates[0], 3)
                                for k, r in zip(args.staleness, rates[2:])},
                      "ratio_to_input_grad": {k: round(r / rates[1], 3)
                                              for k, r in zip(args.staleness, rates[2:])},
                      "cpu_ms_per_step": {run.name: [round(v, 1) for v in run.cpu_ms()]
                                          for run in runs},
                      "dim": args.dim, "prefetch": args.prefetch,
                      "load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
