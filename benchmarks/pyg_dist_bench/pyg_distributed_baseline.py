"""Baseline: PyG's deprecated ``torch_geometric.distributed`` on one machine.

:func:`run_pyg_distributed_baseline` is the system users are being told to
leave, run on the same graph and the same kind of work as pyg-dist:

1. partition the graph with PyG's own ``Partitioner`` (METIS);
2. start one process per partition (``python -m
   pyg_dist_bench.pyg_baseline_worker``), each holding PyG's
   ``LocalFeatureStore`` / ``LocalGraphStore`` for its partition, a
   ``DistContext`` and torch RPC on loopback, exactly as PyG's
   ``examples/distributed/pyg/node_ogb_cpu.py``;
3. each process iterates PyG's ``DistNeighborLoader`` over its partition's
   training seeds for ``num_batches`` batches and reports seeds and sampled
   edges (``batch.edge_index.size(1)``) over the timed loop;
4. every process is stopped in ``finally`` (SIGTERM, then SIGKILL); a run that
   does not finish within ``timeout_s`` is reported as ``hung after N s``.

pyg-lib (which ``DistNeighborSampler`` calls for every hop) has no wheel on the
reachable index. The worker registers a **pure-torch stand-in for pyg-lib's
dist_neighbor_sample** (and its two companions) under ``torch.ops.pyg``; see
:mod:`pyg_dist_bench.pyg_baseline_ops`. The result's ``note`` lists every
stand-in and patch so that a table built from it says what was measured.
"""

from __future__ import annotations

import json
import logging
import os
import os.path as osp
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Optional

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist_bench.pyg_baseline_ops import STANDIN_LABEL

logger = logging.getLogger(__name__)

SYSTEM = "PyG torch_geometric.distributed (deprecated)"


def _free_loopback_port() -> int:
    """A port the OS just handed out on 127.0.0.1 (bind port 0, then release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _read_json(path: str) -> Optional[dict[str, Any]]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _note(part_info: dict[str, Any], ranks: list[dict[str, Any]]) -> str:
    """What was shimmed or patched, in words, for the bench table."""
    ops = sorted({op for r in ranks for op in r.get("registered_ops", [])})
    warn = sorted({p for r in ranks for p in r.get("patched", [])})
    parts = [
        f"{SYSTEM}, run unmodified except: (1) {STANDIN_LABEL} (pyg-lib has no wheel on the "
        "reachable index): torch.ops.pyg."
        + (", torch.ops.pyg.".join(ops) if ops else "dist_neighbor_sample, "
           "merge_sampler_outputs, relabel_neighborhood")
        + " registered with torch.library in the baseline's processes only, vectorised "
        "pure-torch re-implementations of pyg-lib's CPU kernels (uniform, Floyd subset "
        "sampling, no dedup, CSC-position edge ids, seed-order merge, first-seen relabel); "
        "(2) PyG's warn(..., stack_level=2) in " + (", ".join(warn) or "dist_neighbor_sampler")
        + " crashes every DistNeighborSampler with TypeError: the module-level 'warn' is "
        "wrapped to map stack_level to stacklevel",
    ]
    if "metis_patch" in part_info:
        parts.append(f"(3) partitioning: {part_info['metis_patch']}")
    parts.append("one process per partition, each both sampler server (torch RPC) and "
                 "trainer-side loader; figures summed over processes, divided by the slowest "
                 "process's timed loop")
    return "; ".join(parts)


def _launch(cfgs: list[dict[str, Any]], workdir: str, env: dict[str, str],
            procs: list[subprocess.Popen]) -> None:
    """Start one worker per config into ``procs`` (so that a failure half-way
    still leaves every started process to the caller's ``finally``); output
    goes to ``workdir/rank{r}.log``."""
    for cfg in cfgs:
        cfg_path = osp.join(workdir, f"rank{cfg['rank']}.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        with open(osp.join(workdir, f"rank{cfg['rank']}.log"), "w") as log:
            # Own session: the whole process group (with any DataLoader
            # worker it forks) can be stopped by its id.
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "pyg_dist_bench.pyg_baseline_worker", cfg_path],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))


def _wait(procs: list[subprocess.Popen], deadline: float) -> tuple[str, Optional[int]]:
    """Wait until all exit 0 (``ok``), one fails (``error``) or the deadline (``hung``)."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            return "error", failed[0]
        if all(c == 0 for c in codes):
            return "ok", None
        if time.monotonic() >= deadline:
            return "hung", None
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    """SIGTERM each still-running worker's process group, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        for p in alive:
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
    for p in procs:
        if p.poll() is None:
            logger.error("worker pid %d survived SIGKILL", p.pid)


def _worker_configs(part: dict[str, Any], num_parts: int, num_neighbors: list[int],
                    batch_size: int, num_batches: int, workdir: str,
                    timeout_s: float, opts: dict[str, Any]) -> list[dict[str, Any]]:
    port = _free_loopback_port()
    return [{
        "rank": r, "world_size": num_parts, "partition_root": part["partition_root"],
        "labels_path": part["labels_path"], "seeds_path": part["seeds_path"],
        "master_addr": "127.0.0.1", "master_port": port,
        "num_neighbors": list(num_neighbors), "batch_size": batch_size,
        "num_batches": num_batches, "limit_s": max(1.0, float(timeout_s)),
        "result_path": osp.join(workdir, f"result{r}.json"),
        "progress_path": osp.join(workdir, f"progress{r}.json"),
        "record_path": osp.join(workdir, f"batches{r}.safetensors"), **opts,
    } for r in range(num_parts)]


def _summarise(status: str, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate per-rank figures: sums over ranks / slowest rank's loop time."""
    if status != "ok":
        return {}
    wall = max(r["elapsed_s"] for r in ranks)
    seeds = sum(r["seeds"] for r in ranks)
    edges = sum(r["edges"] for r in ranks)
    return {
        "seeds_per_s": seeds / wall if wall > 0 else None,
        "edges_per_s": edges / wall if wall > 0 else None,
        "batches": sum(r["batches"] for r in ranks), "seeds": seeds, "edges": edges,
        "wall_s": wall, "seconds": wall,
        "per_rank": [{k: r.get(k) for k in ("rank", "batches", "seeds", "edges", "nodes",
                                             "elapsed_s", "init_s", "num_train_seeds",
                                             "len_loader", "record_path")} for r in ranks],
    }


def _outcome(out: dict[str, Any], status: str, failed: Optional[int],
             cfgs: list[dict[str, Any]], part: dict[str, Any], timeout_s: float,
             procs: list[subprocess.Popen]) -> None:
    """Fill ``out`` with the figures, or with why there are none."""
    ranks = [_read_json(c["result_path"]) or {"rank": c["rank"]} for c in cfgs]
    out["note"] = _note(part, ranks)
    out["status"] = status
    out.update(_summarise(status, ranks))
    if status == "ok":
        out["result"] = f"{out['seeds_per_s']:.0f} seeds/s, {out['edges_per_s']:.0f} edges/s"
        return
    if status == "hung":
        out["progress"] = [_read_json(c["progress_path"]) for c in cfgs]
        out["result"] = f"hung after {timeout_s:g} s"
    else:
        rep = ranks[failed] if failed is not None else {}
        log = osp.join(osp.dirname(cfgs[0]["result_path"]), f"rank{failed}.log")
        out["error"] = rep.get("error") or (
            f"rank {failed} exited with code {procs[failed].returncode}; see {log}")
        out["traceback"] = rep.get("traceback")
        out["result"] = f"error: {out['error']}"
    # A table that shows only the note still says what happened.
    out["note"] = f"{out['result']}; {out['note']}"


def run_pyg_distributed_baseline(
    data, num_parts: int, num_neighbors: list[int], batch_size: int, num_batches: int,
    workdir: str, timeout_s: float, *, num_workers: int = 0, concurrency: int = 1,
    async_sampling: bool = True, warmup_batches: int = 1, num_threads: Optional[int] = None,
    record_batches: int = 0, seed: int = 0, input_nodes=None, malloc_tuning: bool = False,
) -> dict[str, Any]:
    """Run PyG's ``DistNeighborLoader`` over ``num_parts`` partitions of ``data``.

    Args:
        data: Homogeneous ``torch_geometric.data.Data`` with ``x`` (and ``y``,
            ``train_mask`` if present; without ``train_mask`` every node is a seed).
        num_parts: Number of partitions and of processes (at least 2).
        num_neighbors: Fan-out per hop, e.g. ``[15, 10]``.
        batch_size: Seeds per batch.
        num_batches: Timed batches **per process** (after ``warmup_batches``).
        workdir: Directory for partitions, configs, logs and results.
        timeout_s: Limit for the whole run after partitioning; past it every
            process is killed and the result is ``hung after N s``.
        num_workers: ``DistNeighborLoader`` sampler sub-processes (0: sample in
            the loader's own process, as the figures here assume).
        concurrency: PyG's RPC concurrency per sampler.
        async_sampling: PyG's ``async_sampling`` (its default, ``True``).
        warmup_batches: Untimed batches per process before the timed loop.
        num_threads: torch threads per process (default: CPUs / ``num_parts``).
        record_batches: Save this many timed batches per process
            (``n_id``, ``edge_index``, ``input_id``, ``x``, ``y``) to
            ``workdir/batches{rank}.safetensors`` for validation.
        seed: Base random seed (process ``r`` uses ``seed + r``).
        input_nodes: Seed nodes (int64 tensor) instead of ``train_mask``;
            each process takes the ones its partition owns.
        malloc_tuning: Give the processes pyg-dist's allocator tuning
            (:mod:`pyg_dist.malloc_tuning`); ``False`` runs PyG as it ships.

    Returns:
        ``status`` (``ok``, ``error``, ``hung`` or ``unavailable``), ``system``,
        ``note`` (every stand-in and patch), ``result`` (a one-line figure or
        reason); when ``ok`` also ``seeds_per_s``, ``edges_per_s``, ``batches``,
        ``seeds``, ``edges`` (totals over processes), ``wall_s`` (= ``seconds``:
        the slowest process's timed loop) and ``per_rank``; on failure
        ``error`` (and ``traceback``); on a hang ``progress`` per process.
    """
    if num_parts < 2:
        raise InvalidPartitionArgumentError(
            f"num_parts={num_parts}: PyG's Partitioner needs at least 2 parts; pass 2 or more")
    os.makedirs(workdir, exist_ok=True)
    out: dict[str, Any] = {"system": SYSTEM, "status": "unavailable", "workdir": workdir,
                           "num_parts": num_parts, "num_neighbors": list(num_neighbors),
                           "batch_size": batch_size, "note": ""}
    try:
        import torch_geometric.distributed  # noqa: F401  (deprecated, may be removed)

        from pyg_dist_bench.pyg_baseline_partition import partition_with_pyg
        part = partition_with_pyg(data, num_parts, workdir, input_nodes)
    except Exception as exc:  # the baseline cannot even start: say exactly why
        reason = f"cannot run: {type(exc).__name__}: {exc}"
        out.update(error=f"{type(exc).__name__}: {exc}", result=reason, note=reason)
        return out
    out.update(partition_s=part["partition_s"], metis=part["metis"],
               seeds_per_part=part["seeds_per_part"])

    threads = num_threads or max(1, (os.cpu_count() or 1) // num_parts)
    opts = {"num_workers": num_workers, "concurrency": concurrency,
            "async_sampling": async_sampling, "warmup_batches": warmup_batches,
            "num_threads": threads, "record_batches": record_batches, "seed": seed}
    cfgs = _worker_configs(part, num_parts, num_neighbors, batch_size, num_batches,
                           workdir, timeout_s, opts)
    env = dict(os.environ, TP_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo",
               OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYG_DIST_TUNE_MALLOC="1" if malloc_tuning else "0")
    t0 = time.monotonic()
    procs: list[subprocess.Popen] = []
    try:
        _launch(cfgs, workdir, env, procs)
        out["pids"] = [p.pid for p in procs]
        status, failed = _wait(procs, t0 + timeout_s)
    finally:
        _stop(procs)
    out["total_s"] = time.monotonic() - t0
    _outcome(out, status, failed, cfgs, part, timeout_s, procs)
    return out
