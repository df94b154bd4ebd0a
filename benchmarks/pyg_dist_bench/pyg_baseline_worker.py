"""One process of the ``torch_geometric.distributed`` baseline (one partition).

Run as ``python -m pyg_dist_bench.pyg_baseline_worker CONFIG.json`` by
:func:`pyg_dist_bench.pyg_distributed_baseline.run_pyg_distributed_baseline`.
It does what PyG's ``examples/distributed/pyg/node_ogb_cpu.py`` does for one
node: load its partition into ``LocalGraphStore`` / ``LocalFeatureStore``, set
the labels, build a ``DistContext`` and a ``DistNeighborLoader`` (which starts
torch RPC over loopback), then iterate ``num_batches`` batches and write the
measured figures to a JSON file. Before importing PyG's loader it installs the
pure-torch stand-ins for pyg-lib's operators and the ``warn`` fix
(:mod:`pyg_dist_bench.pyg_baseline_ops`), in this process only.

Everything this process writes is JSON or safetensors; PyG's own partition
files are ``torch.save`` files and are read by PyG's own loaders.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

import torch

from pyg_dist.malloc_tuning import tune_malloc
from pyg_dist_bench.pyg_baseline_ops import (
    STANDIN_LABEL,
    install_pyg_lib_standins,
    patch_pyg_distributed_warn,
)

logger = logging.getLogger(__name__)


def _write_json(path: str, payload: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f)
    # Rename so the parent never reads a half-written file.
    os.replace(tmp, path)


def _build_loader(cfg: dict[str, Any]):
    """Load the partition and build PyG's ``DistNeighborLoader`` (starts RPC)."""
    from safetensors.torch import load_file
    from torch_geometric.distributed import (
        DistContext,
        DistNeighborLoader,
        LocalFeatureStore,
        LocalGraphStore,
    )

    rank, world = cfg["rank"], cfg["world_size"]
    graph = LocalGraphStore.from_partition(cfg["partition_root"], rank)
    feature = LocalFeatureStore.from_partition(cfg["partition_root"], rank)
    # As in PyG's example: the whole label vector is given to every process.
    feature.labels = load_file(cfg["labels_path"])["y"]
    seeds = load_file(cfg["seeds_path"])[f"part_{rank}"]
    _check_enough_seeds(len(seeds), cfg["batch_size"])
    ctx = DistContext(world_size=world, rank=rank, global_world_size=world,
                      global_rank=rank, group_name="pyg-dist-baseline")
    loader = DistNeighborLoader(
        data=(feature, graph), num_neighbors=cfg["num_neighbors"], input_nodes=seeds,
        current_ctx=ctx, device=torch.device("cpu"), batch_size=cfg["batch_size"],
        shuffle=True, drop_last=True, num_workers=cfg["num_workers"],
        persistent_workers=cfg["num_workers"] > 0, master_addr=cfg["master_addr"],
        master_port=cfg["master_port"], concurrency=cfg["concurrency"],
        async_sampling=cfg["async_sampling"])
    # No 'rpc_timeout=': DistNeighborLoader forwards it to torch's DataLoader
    # as well, which rejects it (TypeError); PyG's 180 s default applies and
    # the parent's own deadline bounds the run.
    return loader, seeds


def _start_watchdog(limit_s: float) -> None:
    """Leave at once if the parent dies or ``limit_s`` passes.

    The parent stops this process on its own deadline; this covers a parent
    that was killed outright (its ``finally`` never ran), so that no worker
    stays behind holding ports, even inside a hung RPC call.
    """
    parent, deadline = os.getppid(), time.monotonic() + limit_s

    def watch() -> None:
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, name="baseline-watchdog", daemon=True).start()


def _check_enough_seeds(num_seeds: int, batch_size: int) -> None:
    """With ``drop_last``, fewer seeds than a batch give an empty loader, and
    :func:`_batches` would wait for a batch forever."""
    if num_seeds < batch_size:
        raise ValueError(f"this partition owns {num_seeds} seed nodes, fewer than one batch "
                         f"of {batch_size}: use a smaller batch size or more seed nodes")


def _batches(loader, total: int):
    """Yield ``total`` batches, starting new epochs as needed."""
    done = 0
    while done < total:
        for batch in loader:
            yield batch
            done += 1
            if done == total:
                return


def _record(batch, i: int, out: dict[str, torch.Tensor]) -> None:
    """Keep one batch's structure for validation by the caller."""
    out[f"b{i}.n_id"] = batch.n_id.contiguous()
    out[f"b{i}.edge_index"] = batch.edge_index.contiguous()
    out[f"b{i}.input_id"] = batch.input_id.contiguous()
    out[f"b{i}.x"] = batch.x.contiguous()
    out[f"b{i}.y"] = batch.y.contiguous()
    out[f"b{i}.num_sampled_nodes"] = torch.tensor(batch.num_sampled_nodes)
    out[f"b{i}.num_sampled_edges"] = torch.tensor(batch.num_sampled_edges)


def _run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Build the loader, run warm-up and timed batches; return the figures."""
    t_start = time.perf_counter()
    loader, seeds = _build_loader(cfg)
    init_s = time.perf_counter() - t_start
    _write_json(cfg["progress_path"], {"phase": "loader_ready", "batches": 0})

    warmup, num_batches = cfg["warmup_batches"], cfg["num_batches"]
    recorded: dict[str, torch.Tensor] = {}
    seeds_n = edges_n = nodes_n = 0
    batches = _batches(loader, warmup + num_batches)
    t0 = time.perf_counter()
    for i, batch in enumerate(batches):
        if i < warmup:
            t0 = time.perf_counter()  # the clock starts once the last warm-up batch is out
            continue
        j = i - warmup
        seeds_n += int(batch.batch_size)
        edges_n += int(batch.edge_index.size(1))
        nodes_n += int(batch.n_id.numel())
        if j < cfg["record_batches"]:
            _record(batch, j, recorded)
        if j % 16 == 15:
            _write_json(cfg["progress_path"], {"phase": "running", "batches": j + 1})
    elapsed = time.perf_counter() - t0
    if recorded:
        from safetensors.torch import save_file
        recorded["seeds"] = seeds.contiguous()
        save_file(recorded, cfg["record_path"])
    return {"rank": cfg["rank"], "batches": num_batches, "seeds": seeds_n, "edges": edges_n,
            "nodes": nodes_n, "elapsed_s": elapsed, "init_s": init_s,
            "num_train_seeds": int(seeds.numel()), "len_loader": len(loader),
            "record_path": cfg["record_path"] if recorded else None}


def main(argv: list[str]) -> int:
    """Entry point: ``pyg_baseline_worker CONFIG.json``; returns the exit code."""
    with open(argv[0]) as f:
        cfg = json.load(f)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s rank{cfg['rank']} %(name)s: %(message)s")
    _start_watchdog(cfg["limit_s"] + 30.0)
    torch.set_num_threads(cfg["num_threads"])
    tune_malloc()  # the same allocator settings as pyg-dist's own processes
    torch.manual_seed(cfg["seed"] + cfg["rank"])
    result: dict[str, Any] = {"rank": cfg["rank"], "ok": False}
    try:
        registered = install_pyg_lib_standins()
        patched = patch_pyg_distributed_warn()
        result.update(registered_ops=registered, patched=patched, standin=STANDIN_LABEL)
        result.update(_run(cfg))
        result["ok"] = True
    except Exception as exc:  # report any failure to the parent, then exit non-zero
        result.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        logger.error("baseline worker failed:\n%s", result["traceback"])
    _write_json(cfg["result_path"], result)
    if result["ok"]:
        # Graceful RPC shutdown: keep serving the other partitions' sampling
        # and feature requests until every process is done.
        from torch_geometric.distributed.rpc import shutdown_rpc
        shutdown_rpc(f"rank{cfg['rank']}", graceful=True, timeout=cfg["limit_s"])
        return 0
    # PyG registers a graceful RPC shutdown at exit, which waits for the other
    # processes; after a failure the parent stops them, so leave at once.
    logging.shutdown()
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
