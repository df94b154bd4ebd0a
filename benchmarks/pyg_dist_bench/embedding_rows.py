"""``pyg-dist bench --embedding``: a training epoch that learns its input.

Issue 29's speed target compares a training epoch whose input is a
``DistEmbedding`` (rows read with the batch, ``SparseAdam`` applied on the
servers every step) with the same epoch over served fixed features of the
same width. This module measures the embedding side on the bench's graph:
the same graph without ``x``, partitioned alike and served by servers of its
own, a ``DistEmbedding`` of ``num_features`` columns as the batch's input,
the same seeds, fan-out, batch size and prefetch depth as the
``epoch train K=k`` row it is compared with.
"""

from __future__ import annotations

from typing import Any

import torch

from pyg_dist_bench.bench_config import BenchConfig
from pyg_dist_bench.timing import Row, SageTrainer, time_epoch

EMBEDDING_ATTR = "emb"


def embedding_rows(cfg: BenchConfig, data: Any, seeds: torch.Tensor, tmp: str) -> list[Row]:
    """The ``epoch train K=k, DistEmbedding`` row (``k``: ``cfg.prefetch``).

    Args:
        cfg: What to measure; the embedding has ``cfg.num_features`` columns.
        data: The bench's graph (its ``x`` is dropped here).
        seeds: The seeds of the other epoch rows.
        tmp: Where the bare graph's partitions go.
    """
    import pyg_dist
    from pyg_dist.cluster import LocalCluster
    from pyg_dist.partitioning.writer import partition

    bare = data.clone()
    del bare.x
    root = f"{tmp}/bare-parts"
    partition(bare, cfg.num_parts, root, partitioner=cfg.partitioner, progress=False)
    device = torch.device(cfg.device) if cfg.device is not None else None
    with LocalCluster(root, forwarding=True) as cluster:
        fs, gs = pyg_dist.connect(cluster.endpoints)
        try:
            emb = pyg_dist.DistEmbedding((fs, gs), "bench", cfg.num_features, init="uniform",
                                         attr_name=EMBEDDING_ATTR)
            trainer = SageTrainer(cfg.num_features, cfg.num_classes, cfg.seed, device,
                                  attr=EMBEDDING_ATTR,
                                  sparse=[pyg_dist.optim.SparseAdam([emb], lr=0.01)])

            def loader(batch_seeds: torch.Tensor) -> Any:
                return pyg_dist.DistNeighborLoader(
                    (fs, gs), num_neighbors=cfg.num_neighbors, input_nodes=batch_seeds,
                    batch_size=cfg.batch_size, prefetch=cfg.prefetch, seed=cfg.seed,
                    device=device)

            # Warm-up as the fixed rows had theirs: connections, threads, heap.
            for batch, _ in zip(loader(seeds), range(cfg.prefetch + 1)):
                trainer.step(batch)
            row = time_epoch(f"epoch train K={cfg.prefetch}, DistEmbedding", trainer,
                             loader(seeds), cfg.num_batches)
            trainer.flush()
        finally:
            fs.close()
    row.note = (f"input: DistEmbedding of {cfg.num_features} columns, SparseAdam on the "
                f"servers every step (compare: epoch train K={cfg.prefetch})")
    return [row]
