"""One trainer process of ``pyg-dist bench``'s multi-trainer row.

PyG's ``torch_geometric.distributed`` baseline runs one trainer per part, each
on its own share of the seeds. To compare the same layout, the bench starts
as many of these processes against the same partition servers: each connects,
warms up with one batch, prints ``ready``, waits for a line on stdin (the
bench starts every trainer's timed loop at once, after all of them imported
torch and connected), loads its share with
:class:`~pyg_dist.loader.DistNeighborLoader` and prints one JSON line with
what it did::

    python -m pyg_dist.bench.trainer_worker CONFIG.json

``CONFIG.json`` holds ``endpoints``, ``seeds`` (its share), ``num_neighbors``,
``batch_size``, ``prefetch``, ``seed``, ``threads`` and ``device``.
"""

from __future__ import annotations

import json
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


def main(argv: list[str]) -> int:
    """Entry point: reads the config file, prints the result as one JSON line."""
    with open(argv[0]) as f:
        cfg = json.load(f)
    print(json.dumps(run(cfg)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
