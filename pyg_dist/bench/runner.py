"""``pyg-dist bench``: pyg-dist against its peers, in one run, on one graph.

Rows of the table (each measured over the same seeds, fan-out and batch):

1. ``pyg-local``: PyG's ``NeighborLoader`` on the unpartitioned graph in this
   process: the ceiling without any network.
2. ``pyg-dist K=0`` / ``pyg-dist K=k``: :class:`DistNeighborLoader` against
   one server process per part on loopback, synchronous and prefetching.
3. ``pyg-distributed``: PyG's deprecated ``torch_geometric.distributed``
   loader on the same graph and number of parts (see
   :mod:`pyg_dist.bench.pyg_distributed_baseline` for what is stood in).
4. One GraphSAGE epoch: compute only (batches materialised beforehand),
   loader only, and both together with prefetch 0 and ``k``.

With ``link_delays_ms``, the epoch is repeated with a forwarding proxy
holding every message D ms each way, to show how much latency the pipeline
hides.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import torch

logger = logging.getLogger(__name__)


@dataclass
class BenchConfig:
    """What ``pyg-dist bench`` measures.

    Args:
        num_nodes: Nodes of the synthetic graph.
        avg_degree: Edges drawn per node before symmetrising (10 gives
            about 2M edges for 100k nodes).
        num_features: Feature columns (float32).
        num_classes: Label classes.
        num_parts: Partitions, one server process each.
        partitioner: Partitioner plugin name.
        num_neighbors: Fan-out per hop.
        batch_size: Seeds per batch.
        num_batches: Batches per measured epoch.
        prefetch: Prefetch depth ``k`` for the pipelined rows.
        link_delays_ms: One-way delays to repeat the epoch rows with.
        baseline: Also run PyG's ``torch_geometric.distributed``.
        seed: Seed for the graph, the seeds and the sampler.
        trainers: Trainer processes of the multi-trainer row, each loading
            its share of the seeds against the same servers (the layout of
            PyG's baseline, one trainer per part); ``None`` runs
            ``num_parts``, ``1`` skips the row.
        threads: torch threads of the trainer in the pyg-dist rows; ``None``
            gives it the cores divided by ``num_parts + 1`` (the servers run
            on the same machine, and oversubscribed OpenMP threads spin
            against each other). The ``pyg-local`` row keeps torch's default.
        device: Where batches go and the model trains (``"cuda"`` uses the
            loader's pinned-memory, side-stream copies with prefetch);
            ``None`` keeps everything on the CPU.
    """

    num_nodes: int = 100_000
    avg_degree: float = 10.0
    num_features: int = 128
    num_classes: int = 10
    num_parts: int = 2
    partitioner: str = "metis"
    num_neighbors: list[int] = field(default_factory=lambda: [15, 10])
    batch_size: int = 1024
    num_batches: int = 20
    prefetch: int = 4
    link_delays_ms: list[float] = field(default_factory=list)
    baseline: bool = True
    seed: int = 0
    trainers: Optional[int] = None
    threads: Optional[int] = None
    device: Optional[str] = None


@dataclass
class Row:
    """One measured line of the table."""

    name: str
    seconds: float
    batches: int
    seeds: int
    edges: int
    feature_bytes: int
    note: str = ""

    @property
    def seeds_per_s(self) -> float:
        return self.seeds / self.seconds if self.seconds else 0.0

    @property
    def edges_per_s(self) -> float:
        return self.edges / self.seconds if self.seconds else 0.0

    @property
    def feature_mb_per_s(self) -> float:
        return self.feature_bytes / 1e6 / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(seeds_per_s=self.seeds_per_s, edges_per_s=self.edges_per_s,
                   feature_mb_per_s=self.feature_mb_per_s)
        return out


def _batch_stats(batch: Any) -> tuple[int, int, int]:
    feats = sum(t.numel() * t.element_size() for t in (batch.x, batch.y) if t is not None)
    return int(batch.batch_size), int(batch.edge_index.size(1)), int(feats)


def _on(batch: Any, device: Optional[torch.device]) -> Any:
    """``batch`` on ``device`` (a copy only if it is not there yet)."""
    if device is None or batch.x.device == device:
        return batch
    return batch.to(device)


def _synchronize(device: Optional[torch.device]) -> None:
    # CUDA work is asynchronous: a timer must not stop before it is done.
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def time_loader(name: str, loader: Iterable, max_batches: int, note: str = "",
                device: Optional[torch.device] = None) -> Row:
    """Iterates ``loader`` for at most ``max_batches`` batches, only putting
    them on ``device``, and returns the throughput row."""
    seeds = edges = feats = n = 0
    start = time.perf_counter()
    for batch in loader:
        batch = _on(batch, device)
        s, e, f = _batch_stats(batch)
        seeds, edges, feats, n = seeds + s, edges + e, feats + f, n + 1
        if n >= max_batches:
            break
    _synchronize(device)
    return Row(name, time.perf_counter() - start, n, seeds, edges, feats, note)


class _Trainer:
    """A two-layer GraphSAGE and its optimiser: the compute of one step."""

    def __init__(self, in_channels: int, num_classes: int, seed: int,
                 device: Optional[torch.device] = None) -> None:
        from torch_geometric.nn import GraphSAGE

        torch.manual_seed(seed)
        self.device = device
        self.model = GraphSAGE(in_channels, 256, num_layers=2, out_channels=num_classes)
        if device is not None:
            self.model.to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.01)

    def step(self, batch: Any) -> float:
        batch = _on(batch, self.device)
        self.model.train()
        self.opt.zero_grad()
        out = self.model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = torch.nn.functional.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        self.opt.step()
        return float(loss.detach())


def time_epoch(name: str, trainer: _Trainer, batches: Iterable, max_batches: int) -> Row:
    """Trains one step per batch and returns the epoch's row."""
    seeds = edges = feats = n = 0
    start = time.perf_counter()
    for batch in batches:
        trainer.step(batch)
        s, e, f = _batch_stats(batch)
        seeds, edges, feats, n = seeds + s, edges + e, feats + f, n + 1
        if n >= max_batches:
            break
    _synchronize(trainer.device)
    return Row(name, time.perf_counter() - start, n, seeds, edges, feats)


def _seeds(cfg: BenchConfig, num_nodes: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(cfg.seed)
    count = min(num_nodes, cfg.batch_size * cfg.num_batches)
    return torch.randperm(num_nodes, generator=gen)[:count]


def _device(cfg: BenchConfig) -> Optional[torch.device]:
    return torch.device(cfg.device) if cfg.device is not None else None


def _dist_loader(cfg: BenchConfig, fs: Any, gs: Any, seeds: torch.Tensor, prefetch: int,
                 device: Optional[torch.device] = None) -> Any:
    from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader

    return DistNeighborLoader((fs, gs), num_neighbors=cfg.num_neighbors, input_nodes=seeds,
                              batch_size=cfg.batch_size, prefetch=prefetch, seed=cfg.seed,
                              device=device)


def _epoch_rows(cfg: BenchConfig, fs: Any, gs: Any, seeds: torch.Tensor, tag: str) -> list[Row]:
    """Compute only, loader only and both (prefetch 0 and k) for one link."""
    n, device = cfg.num_batches, _device(cfg)
    trainer = _Trainer(cfg.num_features, cfg.num_classes, cfg.seed, device)
    materialised = list(_dist_loader(cfg, fs, gs, seeds, 0, device))
    trainer.step(materialised[0])  # warm-up: allocator, autograd graph
    rows = [time_epoch(f"epoch compute only{tag}", trainer, materialised, n)]
    rows.append(time_loader(f"epoch loader only K={cfg.prefetch}{tag}",
                            _dist_loader(cfg, fs, gs, seeds, cfg.prefetch, device), n,
                            device=device))
    for k in (0, cfg.prefetch):
        rows.append(time_epoch(f"epoch train K={k}{tag}", trainer,
                               _dist_loader(cfg, fs, gs, seeds, k, device), n))
    return rows


def run_bench(cfg: BenchConfig, workdir: Optional[str] = None) -> dict[str, Any]:
    """Runs every row of the table and returns rows plus ratios (JSON-safe)."""
    from pyg_dist.datasets import fake
    from pyg_dist.partitioning.writer import partition

    with tempfile.TemporaryDirectory(prefix="pyg-dist-bench-", dir=workdir) as tmp:
        data = fake(num_nodes=cfg.num_nodes, avg_degree=cfg.avg_degree,
                    num_channels=cfg.num_features, num_classes=cfg.num_classes, seed=cfg.seed)
        seeds = _seeds(cfg, data.num_nodes)
        rows: list[Row] = [_pyg_local_row(cfg, data, seeds)]
        root = f"{tmp}/parts"
        partition(data, cfg.num_parts, root, partitioner=cfg.partitioner, progress=False)
        default_threads = torch.get_num_threads()
        torch.set_num_threads(_trainer_threads(cfg))
        try:
            rows += _pyg_dist_rows(cfg, root, seeds, tmp)
        finally:
            torch.set_num_threads(default_threads)
        if cfg.baseline:
            rows.append(_baseline_row(cfg, data, seeds, tmp, malloc_tuning=False))
            rows.append(_baseline_row(cfg, data, seeds, tmp, malloc_tuning=True))
    return {"config": asdict(cfg), "rows": [r.as_dict() for r in rows],
            "ratios": ratios(rows, cfg)}


def _warm_up(cfg: BenchConfig, fs: Any, gs: Any, seeds: torch.Tensor,
             device: Optional[torch.device]) -> None:
    """One untimed pass of prefetch + 1 batches, as the baseline warms up too:
    connections, threads, and the heap grown to what K batches in flight need
    (with the allocator tuning it is then reused, not page-faulted again)."""
    warm = seeds[: (cfg.prefetch + 1) * cfg.batch_size]
    for _ in _dist_loader(cfg, fs, gs, warm, cfg.prefetch, device):
        pass


def _trainer_threads(cfg: BenchConfig) -> int:
    return cfg.threads or max(1, (os.cpu_count() or 1) // (cfg.num_parts + 1))


def _pyg_dist_rows(cfg: BenchConfig, root: str, seeds: torch.Tensor, tmp: str) -> list[Row]:
    """The loader rows and epoch rows, on loopback and behind each link delay."""
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.store.connect import connect

    rows: list[Row] = []
    device = _device(cfg)
    with LocalCluster(root) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            _warm_up(cfg, fs, gs, seeds, device)
            for k in (0, cfg.prefetch):
                loader = _dist_loader(cfg, fs, gs, seeds, k, device)
                rows.append(time_loader(f"pyg-dist K={k}", loader, cfg.num_batches,
                                        note=_SHM_NOTE, device=device))
            rows.append(_tcp_row(cfg, cluster.endpoints, seeds, device))
            trainers = cfg.trainers or cfg.num_parts
            if trainers > 1:
                rows.append(_multi_trainer_row(cfg, cluster.endpoints, seeds, trainers, tmp))
            rows += _epoch_rows(cfg, fs, gs, seeds, "")
        finally:
            fs.close()
    for delay in cfg.link_delays_ms:
        with LocalCluster(root, link_delay_ms=delay) as cluster:
            # A server behind a link is on another host: no shared memory.
            fs, gs = connect(cluster.endpoints, _tcp_config())
            try:
                for k in (0, cfg.prefetch):
                    trainer = _Trainer(cfg.num_features, cfg.num_classes, cfg.seed, device)
                    rows.append(time_epoch(f"epoch train K={k} @{delay:g}ms", trainer,
                                           _dist_loader(cfg, fs, gs, seeds, k, device),
                                           cfg.num_batches))
            finally:
                fs.close()
    return rows


_SHM_NOTE = "same host: servers write feature rows into the trainer's shared memory"


def _tcp_config() -> Any:
    from pyg_dist.rpc.config import RpcConfig

    return RpcConfig.from_env(shared_memory_bytes=0)


def _tcp_row(cfg: BenchConfig, endpoints: list[str], seeds: torch.Tensor,
             device: Optional[torch.device]) -> Row:
    """Prefetch ``k`` with every reply over loopback TCP, as between hosts."""
    from pyg_dist.store.connect import connect

    fs, gs = connect(endpoints, _tcp_config())
    try:
        _warm_up(cfg, fs, gs, seeds, device)
        return time_loader(f"pyg-dist K={cfg.prefetch} over TCP",
                           _dist_loader(cfg, fs, gs, seeds, cfg.prefetch, device),
                           cfg.num_batches, note="no shared memory: every reply over "
                           "loopback TCP, as between hosts", device=device)
    finally:
        fs.close()


def _multi_trainer_row(cfg: BenchConfig, endpoints: list[str], seeds: torch.Tensor,
                       trainers: int, tmp: str) -> Row:
    """``trainers`` processes, each loading its share of the seeds at prefetch
    ``k`` against the same servers; counted like the baseline: everything
    they loaded over the slowest one's timed loop."""
    from pyg_dist.bench.trainer_worker import run_trainers

    name = f"pyg-dist K={cfg.prefetch} x{trainers} trainers"
    per = -(-cfg.num_batches // trainers) * cfg.batch_size
    threads = max(1, (os.cpu_count() or 1) // (trainers + cfg.num_parts))
    configs = [{"endpoints": endpoints, "seeds": seeds[i * per:(i + 1) * per].tolist(),
                "num_neighbors": cfg.num_neighbors, "batch_size": cfg.batch_size,
                "prefetch": cfg.prefetch, "seed": cfg.seed + i, "threads": threads,
                "device": cfg.device} for i in range(trainers)]
    try:
        results = run_trainers(configs, tmp)
    except RuntimeError as exc:
        return Row(name, 0.0, 0, 0, 0, 0, note=str(exc))
    return Row(name, max(r["seconds"] for r in results), sum(r["batches"] for r in results),
               sum(r["seeds"] for r in results), sum(r["edges"] for r in results), 0,
               note=f"{trainers} processes, {threads} torch threads each, "
                    f"the layout of the pyg-distributed row")


def _pyg_local_row(cfg: BenchConfig, data: Any, seeds: torch.Tensor) -> Row:
    from torch_geometric.loader import NeighborLoader

    loader = NeighborLoader(data, num_neighbors=cfg.num_neighbors, input_nodes=seeds,
                            batch_size=cfg.batch_size)
    try:
        return time_loader("pyg-local NeighborLoader", loader, cfg.num_batches,
                           note="one process, no network", device=_device(cfg))
    except ImportError as exc:  # PyG samples with pyg-lib or torch-sparse only
        return Row("pyg-local NeighborLoader", 0.0, 0, 0, 0, 0, note=f"not available: {exc}")


BASELINE = "pyg-distributed"
BASELINE_TUNED = "pyg-distributed +malloc tuning"


def _baseline_row(cfg: BenchConfig, data: Any, seeds: torch.Tensor, tmp: str,
                  malloc_tuning: bool) -> Row:
    """PyG's torch_geometric.distributed as it ships, or with the allocator
    tuning every pyg-dist process gets (the comparison of designs alone)."""
    name = BASELINE_TUNED if malloc_tuning else BASELINE
    try:
        from pyg_dist.bench.pyg_distributed_baseline import run_pyg_distributed_baseline
    except ImportError as exc:
        return Row(name, 0.0, 0, 0, 0, 0, note=f"not available: {exc}")
    # Same work as the other rows: the same seeds, and as many batches in
    # all (each of its processes trains on its own share, as PyG does it).
    per_process = -(-cfg.num_batches // cfg.num_parts)
    out = run_pyg_distributed_baseline(
        data, num_parts=cfg.num_parts, num_neighbors=cfg.num_neighbors,
        batch_size=cfg.batch_size, num_batches=per_process,
        workdir=f"{tmp}/pyg{'-tuned' if malloc_tuning else ''}", timeout_s=300.0,
        input_nodes=seeds, seed=cfg.seed, malloc_tuning=malloc_tuning)
    if "seeds_per_s" not in out:
        return Row(name, 0.0, 0, 0, 0, 0, note=str(out.get("note", out)))
    return Row(name, float(out["seconds"]), int(out["batches"]),
               int(out["seeds"]), int(out["edges"]), 0, note=str(out.get("note", "")))


def ratios(rows: list[Row], cfg: BenchConfig) -> dict[str, float]:
    """The ratios the project's targets are stated in."""
    by = {r.name: r for r in rows}
    k = cfg.prefetch
    out: dict[str, float] = {}

    def put(name: str, num: Optional[Row], den: Optional[Row], attr: str) -> None:
        if num is not None and den is not None and getattr(den, attr):
            out[name] = getattr(num, attr) / getattr(den, attr)

    for row in (f"pyg-dist K={k}", f"pyg-dist K={k} over TCP"):
        put(f"{row} / pyg-local (seeds/s)", by.get(row), by.get("pyg-local NeighborLoader"),
            "seeds_per_s")
    multi = next((r for r in rows if r.name.startswith(f"pyg-dist K={k} x")), None)
    for baseline in (BASELINE, BASELINE_TUNED):
        put(f"pyg-dist K={k} / {baseline} (seeds/s)", by.get(f"pyg-dist K={k}"),
            by.get(baseline), "seeds_per_s")
        put(f"pyg-dist K={k} over TCP / {baseline} (seeds/s)",
            by.get(f"pyg-dist K={k} over TCP"), by.get(baseline), "seeds_per_s")
        if multi is not None:
            put(f"{multi.name} / {baseline} (seeds/s)", multi, by.get(baseline),
                "seeds_per_s")
    compute, loader = by.get("epoch compute only"), by.get(f"epoch loader only K={k}")
    both = by.get(f"epoch train K={k}")
    if compute and loader and both:
        out[f"epoch K={k} / max(compute, loader)"] = both.seconds / max(compute.seconds,
                                                                        loader.seconds)
    for delay in cfg.link_delays_ms:
        put(f"epoch K={k} / K=0 @{delay:g}ms (time)", by.get(f"epoch train K={k} @{delay:g}ms"),
            by.get(f"epoch train K=0 @{delay:g}ms"), "seconds")
    return out


def _short(note: str, width: int = 70) -> str:
    # The table stays readable; the full note (what was stood in) is in the JSON.
    return note if len(note) <= width else note[: width - 14] + "... (see JSON)"


def format_table(result: dict[str, Any]) -> str:
    """Renders the rows and ratios as a plain-text table."""
    head = f"{'row':38} {'s':>8} {'batches':>7} {'seeds/s':>10} {'edges/s':>12} {'feat MB/s':>10}"
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(f"{r['name']:38} {r['seconds']:8.2f} {r['batches']:7d} "
                     f"{r['seeds_per_s']:10.0f} {r['edges_per_s']:12.0f} "
                     f"{r['feature_mb_per_s']:10.1f}"
                     + (f"  {_short(r['note'])}" if r["note"] else ""))
    lines.append("")
    for name, value in result["ratios"].items():
        lines.append(f"{name:68} {value:6.2f}x")
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: str) -> None:
    """Writes the result as JSON (for plotting or CI artefacts)."""
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
