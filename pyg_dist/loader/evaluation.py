"""Evaluation across DDP ranks: each rank evaluates its share, the job reduces.

A loader split across ranks (the default) gives every rank a share of the
inputs, padded so that every rank has as many (at most one repeated input
per rank). Two ways put the shares back together, so that the result is the
one a single process would compute over all inputs:

- :class:`DistMetric` collects ``(pred, target, index)`` of a rank's
  batches and, in :meth:`~DistMetric.compute`, gathers them from every rank,
  drops the repeats by ``index`` (``batch.input_id``), orders them by it and
  computes the metric once over all of them: accuracy, ROC AUC, recall@k, a
  callable, or a torchmetrics ``Metric`` (any object with ``update`` and
  ``compute``);
- :func:`gather_rows` (``loader.gather(rows)``) assembles per-input rows
  (layer-wise inference) in input order on every rank.

Without ``torch.distributed`` both are local. Tensors are gathered on the
device they are on (gloo for the CPU, NCCL for CUDA); a rank holds every
rank's predictions of one evaluation, which is what a local evaluation
holds too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Optional, Union

import torch
from torch import Tensor

from pyg_dist.errors import LoaderError

_RECALL = re.compile(r"recall@(\d+)")


def _distributed() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_gather_rows(tensor: Tensor) -> Tensor:
    """Every rank's ``tensor`` concatenated along dim 0, in rank order;
    ranks may hold different numbers of rows."""
    if not _distributed():
        return tensor
    dist = torch.distributed
    world = dist.get_world_size()
    count = torch.tensor([tensor.size(0)], device=tensor.device)
    counts = [torch.empty_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    sizes = [int(c) for c in counts]
    padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
    padded[:tensor.size(0)] = tensor
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([part[:size] for part, size in zip(parts, sizes)])


def gather_rows(rows: Tensor, positions: Tensor, num_inputs: int) -> Tensor:
    """``out[positions[i]] = rows[i]`` over every rank's rows.

    Args:
        rows: This rank's rows, one per input position.
        positions: Their input positions.
        num_inputs: Inputs of the whole loader (rows of the result).

    Returns:
        ``[num_inputs, *rows.shape[1:]]`` on ``rows``' device, the same on
        every rank.
    """
    positions = positions.to(rows.device)
    all_positions = all_gather_rows(positions)
    all_rows = all_gather_rows(rows)
    out = rows.new_zeros((num_inputs, *rows.shape[1:]))
    out[all_positions] = all_rows
    return out


Metric = Union[str, Callable[[Tensor, Tensor], Any], Any]


class DistMetric:
    """A metric over every rank's share of an evaluation, computed once.

    ::

        metric = pyg_dist.DistMetric("accuracy")
        for batch in test_loader:            # this rank's share
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            metric.update(out, batch.y[:batch.batch_size], batch.input_id)
        acc = metric.compute()               # the same on every rank

    Args:
        metric: ``"accuracy"`` (``pred`` class scores ``[N, C]`` or labels
            ``[N]``), ``"auc"`` (ROC AUC of scores ``[N]`` against 0/1
            targets), ``"recall@K"`` (scores ``[N, C]`` of C candidates,
            targets the true candidate's index ``[N]`` or a 0/1 matrix
            ``[N, C]``: the mean share of true candidates in the top K),
            a callable ``f(pred, target) -> number``, or an object with
            ``update(pred, target)`` and ``compute()`` (a torchmetrics
            ``Metric``), given every rank's predictions at once.

    Raises:
        LoaderError: for a metric name it does not know.
    """

    def __init__(self, metric: Metric = "accuracy") -> None:
        if isinstance(metric, str) and metric not in ("accuracy", "auc") \
                and not _RECALL.fullmatch(metric):
            raise LoaderError(f"unknown metric {metric!r}: pass 'accuracy', 'auc', "
                              f"'recall@K' (e.g. 'recall@10'), a callable f(pred, target), "
                              f"or a torchmetrics Metric")
        if not isinstance(metric, str) and not callable(metric) \
                and not (hasattr(metric, "update") and hasattr(metric, "compute")):
            raise LoaderError(f"metric must be a name, a callable or a torchmetrics Metric, "
                              f"got {type(metric).__name__}")
        self.metric = metric
        self.reset()

    def reset(self) -> None:
        """Forgets every update (before the next evaluation)."""
        self._preds: list[Tensor] = []
        self._targets: list[Tensor] = []
        self._indices: list[Tensor] = []

    def update(self, pred: Tensor, target: Tensor, index: Optional[Tensor] = None) -> None:
        """Adds one batch of this rank's share.

        Args:
            pred: Predictions, one row per input.
            target: Targets, one row per input.
            index: The inputs' ids (``batch.input_id``): repeats (the split's
                padding) count once, and everything is ordered by it.
                Without it nothing is deduplicated.
        """
        pred, target = pred.detach(), target.detach()
        if pred.size(0) != target.size(0) or (index is not None
                                                and index.numel() != pred.size(0)):
            raise LoaderError(f"update() needs one prediction, target (and index) per "
                              f"input, got {pred.size(0)}, {target.size(0)} and "
                              f"{None if index is None else index.numel()}")
        if (index is None) != (not self._indices) and self._preds:
            raise LoaderError("pass index= with every update() or with none")
        self._preds.append(pred)
        self._targets.append(target)
        if index is not None:
            self._indices.append(index.detach().reshape(-1).to(pred.device, torch.long))

    def gathered(self) -> tuple[Tensor, Tensor]:
        """``(pred, target)`` of every rank, repeats dropped, ordered by index."""
        if not self._preds:
            raise LoaderError("compute() before any update(): this rank evaluated nothing")
        pred = all_gather_rows(torch.cat(self._preds))
        target = all_gather_rows(torch.cat(self._targets).to(pred.device))
        if self._indices:
            index = all_gather_rows(torch.cat(self._indices))
            order = torch.argsort(index, stable=True)
            index, pred, target = index[order], pred[order], target[order]
            first = torch.ones_like(index, dtype=torch.bool)
            first[1:] = index[1:] != index[:-1]
            pred, target = pred[first], target[first]
        return pred, target

    def compute(self) -> float:
        """The metric over every rank's updates (the same on every rank)."""
        pred, target = self.gathered()
        metric = self.metric
        if metric == "accuracy":
            return accuracy(pred, target)
        if metric == "auc":
            return roc_auc(pred, target)
        if isinstance(metric, str):
            return recall_at_k(pred, target, int(_RECALL.fullmatch(metric).group(1)))
        if hasattr(metric, "update") and hasattr(metric, "compute"):
            metric.reset()
            metric.update(pred, target)
            return float(metric.compute())
        return float(metric(pred, target))


def accuracy(pred: Tensor, target: Tensor) -> float:
    """Share of correct labels; ``pred`` is class scores ``[N, C]`` or labels."""
    if pred.dim() > 1 and pred.size(-1) > 1:
        pred = pred.argmax(dim=-1)
    return float((pred.reshape(-1) == target.reshape(-1)).sum()) / max(pred.numel(), 1)


def roc_auc(score: Tensor, target: Tensor) -> float:
    """ROC AUC (Mann-Whitney U, ties counted half) of ``score`` for 0/1 ``target``."""
    score, target = score.reshape(-1).double(), target.reshape(-1).bool()
    positives = int(target.sum())
    negatives = target.numel() - positives
    if not positives or not negatives:
        raise LoaderError("ROC AUC needs positive and negative targets")
    # Average ranks of tied scores (1-based).
    values, inverse, counts = torch.unique(score, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    average = ends - (counts.double() - 1) / 2
    ranks = average[inverse]
    u = float(ranks[target].sum()) - positives * (positives + 1) / 2
    return u / (positives * negatives)


def recall_at_k(score: Tensor, target: Tensor, k: int) -> float:
    """Mean share of each row's true candidates among its ``k`` best scores."""
    if score.dim() != 2:
        raise LoaderError(f"recall@{k} needs scores of shape [N, candidates], got "
                          f"{tuple(score.shape)}")
    if target.dim() == 1:
        target = torch.nn.functional.one_hot(target.long(), score.size(1))
    target = target.bool()
    top = score.topk(min(k, score.size(1)), dim=1).indices
    hits = target.gather(1, top).sum(dim=1).double()
    wanted = target.sum(dim=1).double()
    keep = wanted > 0
    return float((hits[keep] / wanted[keep]).mean()) if bool(keep.any()) else 0.0
