"""``pyg-dist bench --embedding``: a training epoch that learns its input.

Issue 29's speed target compares a training epoch whose input is a
``DistEmbedding`` (rows read with the batch, ``SparseAdam`` applied on the
servers every step) with the same epoch over served fixed features of the
same width. This module measures the embedding side on the bench's graph:
the same graph without ``x``, partitioned alike and served by servers of its
own, a ``DistEmbedding`` of ``num_features`` columns as the batch's input,
the same seeds, fan-out, batch size and prefetch depth as the
``epoch train K=k`` row it is compared with.

Two rows on the fixed features' servers say what learning the input costs
whoever holds it (:func:`learned_input_rows`): the same epoch with the
loss's gradient computed back to ``x`` (the model's own backward to its
input, which any learned input pays and a fixed one does not: the ceiling of
the embedding row), and the same epoch learning a local
``nn.Embedding(sparse=True)`` with torch's ``SparseAdam`` (what a PyG user
does without pyg-dist, the whole table on the trainer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from pyg_dist_bench.bench_config import BenchConfig
from pyg_dist_bench.timing import Row, SageTrainer, time_epoch

EMBEDDING_ATTR = "emb"


def learned_input_rows(cfg: BenchConfig, loader: Callable[[int], Any],
                       num_nodes: int) -> list[Row]:
    """The ``epoch train K=k, input gradient`` and ``epoch train K=k, local
    nn.Embedding`` rows (``k``: ``cfg.prefetch``).

    Args:
        cfg: What to measure.
        loader: The fixed features' loader at a prefetch depth, over the
            seeds of the ``epoch train`` rows.
        num_nodes: Rows of the local embedding (the graph's nodes).
    """
    k, device = cfg.prefetch, torch.device(cfg.device) if cfg.device is not None else None
    gradient = SageTrainer(cfg.num_features, cfg.num_classes, cfg.seed, device,
                           inputs=lambda batch: batch.x.requires_grad_())
    table = torch.nn.Embedding(num_nodes, cfg.num_features, sparse=True, device=device)
    local = SageTrainer(cfg.num_features, cfg.num_classes, cfg.seed, device,
                        sparse=[torch.optim.SparseAdam(table.parameters(), lr=0.01)],
                        inputs=lambda batch: table(batch.n_id))
    rows = []
    for name, trainer in (("input gradient", gradient), ("local nn.Embedding", local)):
        for batch, _ in zip(loader(k), range(k + 1)):
            trainer.step(batch)  # warm-up: allocator, autograd graph
        rows.append(time_epoch(f"epoch train K={k}, {name}", trainer, loader(k),
                               cfg.num_batches))
    rows[0].note = ("fixed features, the loss's gradient computed back to x: what any "
                    "learned input costs the model (the ceiling of the DistEmbedding row)")
    rows[1].note = (f"input: a local nn.Embedding(sparse=True) of {cfg.num_features} columns, "
                    "torch's SparseAdam, the whole table on the trainer")
    return rows


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
