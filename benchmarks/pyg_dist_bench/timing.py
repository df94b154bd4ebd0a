"""Timing one pass of a loader or one training epoch, as a row of the table.

Every row of ``pyg-dist bench`` (and of the baseline rows the benchmarks
package adds) is a :class:`Row`: what was loaded over how long. The timers
here only iterate and count; building loaders is the runner's business.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch


@dataclass
class Row:
    """One measured line of the table.

    Args:
        name: The row's label, e.g. ``pyg-dist K=4``.
        seconds: Wall time of the timed loop.
        batches: Batches loaded (or trained on) in that time.
        seeds: Seed nodes in those batches.
        edges: Sampled edges in those batches.
        feature_bytes: Bytes of ``x`` and ``y`` in those batches (0 where a
            row does not count them).
        note: What the row measured beyond its name (shown shortened).
    """

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
        """The row and its rates, JSON-safe."""
        out = asdict(self)
        out.update(seeds_per_s=self.seeds_per_s, edges_per_s=self.edges_per_s,
                   feature_mb_per_s=self.feature_mb_per_s)
        return out


def _batch_stats(batch: Any) -> tuple[int, int, int]:
    """Seeds, sampled edges and feature bytes (``x``, ``y``) of a ``Data`` or
    ``HeteroData`` batch."""
    stores = batch.node_stores
    seeds = sum(int(s.batch_size) for s in stores if "batch_size" in s)
    edges = sum(int(s.edge_index.size(1)) for s in batch.edge_stores if "edge_index" in s)
    feats = sum(s[k].numel() * s[k].element_size() for s in stores for k in ("x", "y")
                if k in s)
    return seeds, edges, int(feats)


def _on(batch: Any, device: Optional[torch.device]) -> Any:
    """``batch`` on ``device`` (a copy only if it is not there yet)."""
    if device is None:
        return batch
    x = next((s.x for s in batch.node_stores if "x" in s), None)
    return batch if x is not None and x.device == device else batch.to(device)


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


class SageTrainer:
    """A two-layer GraphSAGE and its optimiser: the compute of one step.

    Args:
        in_channels: Feature columns of a batch's input.
        num_classes: Label classes (the model's output width).
        seed: Seed of the model's initial weights.
        device: Where the model lives and trains; the CPU if ``None``.
        attr: The batch's attribute the model reads (``x``; a
            ``DistEmbedding``'s ``attr_name`` to learn the input).
        sparse: Optimisers stepped with the model's (``pyg_dist.optim``'s,
            for a ``DistEmbedding`` input; torch's for a local one).
        inputs: The model's input from a batch, when it is not
            ``batch[attr]`` (a local ``nn.Embedding`` of ``batch.n_id``; ``x``
            with its gradient asked for).
    """

    def __init__(self, in_channels: int, num_classes: int, seed: int,
                 device: Optional[torch.device] = None, attr: str = "x",
                 sparse: Sequence[Any] = (),
                 inputs: Optional[Callable[[Any], torch.Tensor]] = None) -> None:
        from torch_geometric.nn import GraphSAGE

        torch.manual_seed(seed)
        self.device = device
        self.attr = attr
        self.inputs = inputs or (lambda batch: batch[attr])
        self.model = GraphSAGE(in_channels, 256, num_layers=2, out_channels=num_classes)
        if device is not None:
            self.model.to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.optimizers = [self.opt, *sparse]

    def step(self, batch: Any) -> float:
        """Trains one step on ``batch`` (moved to the model's device) and
        returns its loss."""
        batch = _on(batch, self.device)
        self.model.train()
        for opt in self.optimizers:
            opt.zero_grad()
        out = self.model(self.inputs(batch), batch.edge_index)[: batch.batch_size]
        loss = torch.nn.functional.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        for opt in self.optimizers:
            opt.step()
        return float(loss.detach())

    def flush(self) -> None:
        """Waits for the sparse optimisers' last pushes (``pyg_dist.optim``'s;
        torch's have none)."""
        for opt in self.optimizers[1:]:
            if hasattr(opt, "flush"):
                opt.flush()


def time_epoch(name: str, trainer: SageTrainer, batches: Iterable, max_batches: int) -> Row:
    """Trains one step per batch for at most ``max_batches`` batches and
    returns the epoch's row."""
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


