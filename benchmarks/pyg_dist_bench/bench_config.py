"""What ``pyg-dist bench`` measures: :class:`BenchConfig`, shared by the
runner, the rows and the report (in a module of its own, so that none of them
imports another for it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


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
        link_delays_ms: One-way delays to repeat the epoch rows with (needs
            the benchmarks package).
        baseline: Also run PyG's ``torch_geometric.distributed`` (needs the
            benchmarks package).
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
        embedding: Also train the epoch at ``prefetch`` with a
            ``DistEmbedding`` of ``num_features`` columns as the input
            (``SparseAdam`` on the servers), on the graph without ``x``.
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
    baseline: bool = False
    seed: int = 0
    trainers: Optional[int] = None
    threads: Optional[int] = None
    device: Optional[str] = None
    embedding: bool = False
