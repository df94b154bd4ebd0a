"""``pyg-dist bench``: pyg-dist against PyG, in one run, on one graph.

Rows of the table (each measured over the same seeds, fan-out and batch):

1. ``pyg-local``: PyG's ``NeighborLoader`` on the unpartitioned graph in this
   process: the ceiling without any network.
2. ``pyg-dist K=0`` / ``pyg-dist K=k``: :class:`DistNeighborLoader` against
   one server process per part on loopback, synchronous and prefetching;
   ``over TCP`` without shared memory; ``xN trainers`` from N processes.
3. One GraphSAGE epoch: compute only (batches materialised beforehand),
   loader only, and both together with prefetch 0 and ``k``; with
   ``embedding``, the epoch at ``k`` learning a ``DistEmbedding`` input
   (:mod:`~pyg_dist_bench.embedding_rows`).

Two kinds of rows need harness code of this package:
``baseline`` adds PyG's deprecated ``torch_geometric.distributed`` loader on
the same graph and number of parts, and ``link_delays_ms`` repeats the epoch
behind a forwarding proxy holding every message D ms each way, to show how
much latency the pipeline hides.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import asdict
from typing import Any, Optional

import torch

from pyg_dist_bench.bench_config import BenchConfig
from pyg_dist_bench.embedding_rows import embedding_rows, learned_input_rows
from pyg_dist_bench.link_proxy import delayed_link
from pyg_dist_bench.report import ratios
from pyg_dist_bench.rows import baseline_rows
from pyg_dist_bench.timing import Row, SageTrainer, time_epoch, time_loader

logger = logging.getLogger(__name__)


def _seeds(cfg: BenchConfig, num_nodes: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(cfg.seed)
    count = min(num_nodes, cfg.batch_size * cfg.num_batches)
    return torch.randperm(num_nodes, generator=gen)[:count]


def _device(cfg: BenchConfig) -> Optional[torch.device]:
    return torch.device(cfg.device) if cfg.device is not None else None


def _dist_loader(cfg: BenchConfig, fs: Any, gs: Any, seeds: torch.Tensor, prefetch: int,
                 device: Optional[torch.device] = None, server_hops: bool = False) -> Any:
    """The measured loader; every hop goes back to the trainer unless
    ``server_hops`` (the rows named so: ``sample_tree``)."""
    from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader

    return DistNeighborLoader((fs, gs), num_neighbors=cfg.num_neighbors, input_nodes=seeds,
                              batch_size=cfg.batch_size, prefetch=prefetch, seed=cfg.seed,
                              device=device, server_hops=server_hops)


def _epoch_rows(cfg: BenchConfig, fs: Any, gs: Any, seeds: torch.Tensor, tag: str) -> list[Row]:
    """Compute only, loader only and both (prefetch 0 and k) for one link."""
    n, device = cfg.num_batches, _device(cfg)
    trainer = SageTrainer(cfg.num_features, cfg.num_classes, cfg.seed, device)
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
    """Runs every row of the table.

    Args:
        cfg: What to measure.
        workdir: Where the temporary partitions and logs go (the system's
            temporary directory if ``None``); removed afterwards.

    Returns:
        ``config``, ``rows`` (``Row.as_dict()`` each) and ``ratios``, JSON-safe.
    """
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
            if cfg.embedding:
                rows += embedding_rows(cfg, data, seeds, tmp)
            if cfg.link_delays_ms:
                rows += _delay_rows(cfg, root, seeds)
        finally:
            torch.set_num_threads(default_threads)
        baselines: list[Row] = []
        if cfg.baseline:
            baselines = baseline_rows(cfg, data, seeds, tmp)
        rows += baselines
    return {"config": asdict(cfg), "rows": [r.as_dict() for r in rows],
            "ratios": ratios(rows, cfg, [r.name for r in baselines])}


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
    """The loader rows and epoch rows on loopback."""
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.store.connect import connect

    rows: list[Row] = []
    device = _device(cfg)
    with LocalCluster(root, forwarding=True) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            _warm_up(cfg, fs, gs, seeds, device)
            for k in (0, cfg.prefetch):
                loader = _dist_loader(cfg, fs, gs, seeds, k, device)
                rows.append(time_loader(f"pyg-dist K={k}", loader, cfg.num_batches,
                                        note=_SHM_NOTE, device=device))
            for k in (0, cfg.prefetch):
                loader = _dist_loader(cfg, fs, gs, seeds, k, device, server_hops=True)
                rows.append(time_loader(f"pyg-dist K={k} server hops", loader,
                                        cfg.num_batches, note=_TREE_NOTE, device=device))
            rows += _colocated_rows(cfg, cluster.endpoints, seeds, device)
            rows.append(_tcp_row(cfg, cluster.endpoints, seeds, device))
            trainers = cfg.trainers or cfg.num_parts
            if trainers > 1:
                rows.append(_multi_trainer_row(cfg, cluster.endpoints, seeds, trainers, tmp))
            rows += _epoch_rows(cfg, fs, gs, seeds, "")
            if cfg.embedding:
                rows += learned_input_rows(
                    cfg, lambda k: _dist_loader(cfg, fs, gs, seeds, k, device),
                    gs.num_nodes)
        finally:
            fs.close()
    return rows


def _colocated_rows(cfg: BenchConfig, endpoints: list[str], seeds: torch.Tensor,
                    device: Optional[torch.device]) -> list[Row]:
    """The loader with every part served in this process
    (``connect(colocate=True)``), synchronous and at ``prefetch``."""
    from pyg_dist.store.connect import connect

    fs, gs = connect(endpoints, colocate=True)
    try:
        _warm_up(cfg, fs, gs, seeds, device)
        return [time_loader(f"pyg-dist K={k} colocated", _dist_loader(cfg, fs, gs, seeds, k,
                                                                      device),
                            cfg.num_batches, note=_COLOCATED_NOTE, device=device)
                for k in (0, cfg.prefetch)]
    finally:
        fs.close()


def _delay_rows(cfg: BenchConfig, root: str, seeds: torch.Tensor) -> list[Row]:
    """Behind each link delay: the training epoch at prefetch 0 and ``k``,
    and the loader alone at prefetch 0 with every hop from the trainer and
    with server hops, the servers' own links direct (one fast network) or
    delayed as well (every host apart)."""
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.store.connect import connect

    rows: list[Row] = []
    device = _device(cfg)
    for delay in cfg.link_delays_ms:
        for servers_apart in (False, True):
            with LocalCluster(root, forwarding=True) as cluster, \
                    delayed_link(cluster.endpoints, delay, cluster.host) as endpoints:
                if servers_apart:
                    # Read on the first sample_tree: the servers then reach
                    # each other through the delayed links too.
                    cluster.set_peers(endpoints)
                # A server behind a link is on another host: no shared memory.
                fs, gs = connect(endpoints, _tcp_config())
                try:
                    rows += _delayed(cfg, fs, gs, seeds, delay, servers_apart, device)
                finally:
                    fs.close()
    return rows


def _delayed(cfg: BenchConfig, fs: Any, gs: Any, seeds: torch.Tensor, delay: float,
             servers_apart: bool, device: Optional[torch.device]) -> list[Row]:
    rows = []
    tag = f"@{delay:g}ms"
    if not servers_apart:
        for k in (0, cfg.prefetch):
            trainer = SageTrainer(cfg.num_features, cfg.num_classes, cfg.seed, device)
            rows.append(time_epoch(f"epoch train K={k} {tag}", trainer,
                                   _dist_loader(cfg, fs, gs, seeds, k, device),
                                   cfg.num_batches))
        rows.append(time_loader(f"loader K=0 {tag}", _dist_loader(cfg, fs, gs, seeds, 0, device),
                                cfg.num_batches, device=device))
    name = f"loader K=0 {tag} server hops" + (", servers apart" if servers_apart else "")
    note = "the servers reach each other through delayed links too" if servers_apart \
        else "the servers' own links undelayed (one fast network)"
    rows.append(time_loader(name, _dist_loader(cfg, fs, gs, seeds, 0, device, server_hops=True),
                            cfg.num_batches, note=note, device=device))
    return rows


_SHM_NOTE = "same host: servers write feature rows into the trainer's shared memory"
_TREE_NOTE = "the servers sample the hops among themselves (sample_tree)"
_COLOCATED_NOTE = "the parts mapped and read in the trainer's process (colocate=True)"


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
    from pyg_dist_bench.trainer_worker import run_trainers

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


