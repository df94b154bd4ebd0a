"""One trainer process of ``pyg-dist bench``'s multi-trainer row.

PyG's ``torch_geometric.distributed`` baseline runs one trainer per part, each
on its own share of the seeds. To compare the same layout, the bench starts
as many of these processes against the same partition servers: each connects,
warms up with one batch, prints ``ready``, waits for a line on stdin (the
bench starts every trainer's timed loop at once, after all of them imported
torch and connected), loads its share with
:class:`~pyg_dist.loader.DistNeighborLoader` and prints one JSON line with
what it did::

    python -m pyg_dist_bench.trainer_worker CONFIG.json

``CONFIG.json`` holds ``endpoints``, ``seeds`` (its share), ``num_neighbors``,
``batch_size``, ``prefetch``, ``seed``, ``threads`` and ``device``.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from typing import Any


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Times one pass of a loader over this trainer's seeds."""
    import torch

    from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
    from pyg_dist.malloc_tuning import tune_malloc
    from pyg_dist.store.connect import connect

    tune_malloc()
    torch.set_num_threads(int(cfg["threads"]))
    device = torch.device(cfg["device"]) if cfg.get("device") else None
    seeds = torch.tensor(cfg["seeds"], dtype=torch.long)
    fs, gs = connect(cfg["endpoints"])
    try:
        def loader(nodes: torch.Tensor) -> DistNeighborLoader:
            return DistNeighborLoader((fs, gs), num_neighbors=cfg["num_neighbors"],
                                      input_nodes=nodes, batch_size=cfg["batch_size"],
                                      prefetch=cfg["prefetch"], seed=cfg["seed"],
                                      device=device)

        # Warm-up: connections, threads, and the heap K batches in flight need.
        for _ in loader(seeds[: (cfg["prefetch"] + 1) * cfg["batch_size"]]):
            pass
        print("ready", flush=True)
        sys.stdin.readline()
        batches = edges = 0
        start = time.perf_counter()
        for batch in loader(seeds):
            batches += 1
            edges += int(batch.edge_index.size(1))
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
    finally:
        fs.close()
    return {"seconds": seconds, "batches": batches, "seeds": int(seeds.numel()),
            "edges": edges}


def run_trainers(configs: list[dict[str, Any]], workdir: str,
                 timeout: float = 600.0) -> list[dict[str, Any]]:
    """Runs one trainer process per config and returns their results.

    Every trainer imports torch, connects and warms up before any of them
    starts its timed loop. All of it must end within ``timeout`` seconds.
    Every process is gone when this returns.

    Raises:
        RuntimeError: if a trainer fails, with the end of its stderr.
    """
    procs: list[tuple[subprocess.Popen, str]] = []
    deadline = time.monotonic() + timeout
    try:
        for i, cfg in enumerate(configs):
            path, log = f"{workdir}/trainer-{i}.json", f"{workdir}/trainer-{i}.log"
            with open(path, "w") as f:
                json.dump(cfg, f)
            with open(log, "w") as err:  # a file: a full stderr pipe cannot block it
                procs.append((subprocess.Popen(
                    [sys.executable, "-m", "pyg_dist_bench.trainer_worker", path],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True),
                    log))
        for proc, log in procs:
            # select: a trainer stuck before its ready line must not hang the bench.
            ready, _, _ = select.select([proc.stdout], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready or proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a trainer failed or hung before its timed loop "
                                   f"(limit {timeout:g} s): {_tail(log)}")
        for proc, _ in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc, log in procs:
            try:
                out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                raise RuntimeError(f"a trainer did not finish within {timeout:g} s: "
                                   f"{_tail(log)}") from exc
            if proc.returncode != 0:
                raise RuntimeError(f"a trainer failed with exit code {proc.returncode}: "
                                   f"{_tail(log)}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _tail(log: str, chars: int = 300) -> str:
    with open(log) as f:
        return f.read()[-chars:].strip() or "(nothing on stderr)"


def main(argv: list[str]) -> int:
    """Entry point: reads the config file, prints the result as one JSON line."""
    with open(argv[0]) as f:
        cfg = json.load(f)
    print(json.dumps(run(cfg)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
