"""Sparse optimiser steps applied by a partition server to embedding rows.

An ``emb_push`` request names its optimiser in a small map (``kind``,
``lr`` and the kind's hyper-parameters, and for Adam and Adagrad the
trainer's step count), checked against
:data:`pyg_dist.protocol.ops.OPTIMIZER` before the handler runs;
:meth:`Optimizer.from_args` reads it and :func:`apply_update` applies one
step to the rows a push names, with the per-row state kept beside the table.

The arithmetic follows torch's own sparse paths operation by operation
(``torch.optim.SGD``, ``SparseAdam``, ``Adagrad`` on a sparse gradient), so
that one trainer's steps on a :class:`pyg_dist.DistEmbedding` equal those of
``torch.nn.Embedding(sparse=True)`` with the matching torch optimiser.
Adam's bias correction uses the trainer's step count, as torch's does (one
count per parameter, not per row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dist.kernels.place_rows import place_rows

STATE_KEYS = {"sgd": (), "adam": ("exp_avg", "exp_avg_sq"), "adagrad": ("sum",)}
"""Per kind, the per-row state tensors kept beside a table (float32, one row
per table row)."""


@dataclass(frozen=True)
class Optimizer:
    """One push's optimiser.

    Args:
        kind: One of :data:`~pyg_dist.protocol.ops.OPTIMIZER_KINDS`.
        lr: Learning rate.
        step: The trainer's step count, from 1 (Adam's bias correction,
            Adagrad's decay).
        betas: Adam's ``(beta1, beta2)``.
        eps: Adam's and Adagrad's epsilon.
        lr_decay: Adagrad's learning-rate decay.
        initial_accumulator_value: Adagrad's first value of its sums.
    """

    kind: str
    lr: float
    step: int = 1
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    lr_decay: float = 0.0
    initial_accumulator_value: float = 0.0

    @classmethod
    def from_args(cls, spec: dict[str, Any]) -> Optimizer:
        """``emb_push``'s ``optimizer`` argument, its form and ranges
        already checked (:data:`~pyg_dist.protocol.ops.OPTIMIZER`)."""
        betas = spec.get("betas", cls.betas)
        return cls(spec["kind"], float(spec["lr"]), spec.get("step", 1),
                   (float(betas[0]), float(betas[1])), float(spec.get("eps", cls.eps)),
                   float(spec.get("lr_decay", 0.0)),
                   float(spec.get("initial_accumulator_value", 0.0)))


def new_state(opt: Optimizer, rows: int, dim: int) -> dict[str, Tensor]:
    """The per-row state of a table that ``opt`` starts updating."""
    fill = opt.initial_accumulator_value if opt.kind == "adagrad" else 0.0
    return {key: torch.full((rows, dim), fill, dtype=torch.float32)
            for key in STATE_KEYS[opt.kind]}


CHUNK_BYTES = 1 << 20
"""Bytes of one float32 temporary of an update: a push's rows are updated
in chunks of this size, so the temporaries of each chunk stay in the
cache and are reused from the heap instead of page-faulted anew (one
16k-row Adam push of 64 columns measured 12 ms unchunked, 4 ms chunked, on
one core of the 2-core machine)."""


def apply_update(weight: Tensor, state: dict[str, Tensor], rows: Tensor, grads: Tensor,
                 opt: Optimizer, chunk_bytes: int = CHUNK_BYTES) -> None:
    """One step of ``opt`` on ``weight[rows]`` (rows unique, grads float32
    ``[len(rows), dim]``, finite), in place, with ``state`` of the same rows.

    The arithmetic is float32 whatever the table's dtype; a bfloat16 table
    stores the result rounded. Rows are independent (the ids are unique),
    so the rows are updated in chunks of ``chunk_bytes`` (of float32
    temporaries) with the same arithmetic, row for row, as one pass over all
    of them.
    """
    chunk = max(1, chunk_bytes // (4 * max(1, weight.shape[1])))
    step_size = _adam_step_size(opt) if opt.kind == "adam" else 0.0
    for start in range(0, rows.numel(), chunk):
        _update_rows(weight, state, rows[start:start + chunk], grads[start:start + chunk],
                     opt, step_size)


def _update_rows(weight: Tensor, state: dict[str, Tensor], rows: Tensor, grads: Tensor,
                 opt: Optimizer, step_size: float) -> None:
    if opt.kind == "sgd":
        delta = grads.mul(-opt.lr)
    elif opt.kind == "adam":
        delta = _adam_delta(state, rows, grads, opt, step_size)
    else:
        delta = _adagrad_delta(state, rows, grads, opt)
    if weight.dtype == torch.float32:
        # Each row is named once: adding in place is the gather, add and
        # write back of the general path, in one pass.
        weight.index_add_(0, rows, delta)
        return
    new = weight.index_select(0, rows).to(torch.float32).add_(delta)
    weight.index_copy_(0, rows, new.to(weight.dtype))


def _adam_step_size(opt: Optimizer) -> float:
    beta1, beta2 = opt.betas
    bias_correction1 = 1 - beta1 ** opt.step
    bias_correction2 = 1 - beta2 ** opt.step
    return opt.lr * math.sqrt(bias_correction2) / bias_correction1


def _adam_delta(state: dict[str, Tensor], rows: Tensor, grads: Tensor,
                opt: Optimizer, step_size: float) -> Tensor:
    # torch.optim._functional.sparse_adam, value for value (its ``update +
    # old`` is the new moment, computed here in place on the update: the
    # same float operations with fewer temporaries).
    beta1, beta2 = opt.betas
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    old_avg = exp_avg.index_select(0, rows)
    avg = grads.sub(old_avg).mul_(1 - beta1).add_(old_avg)
    place_rows(exp_avg, rows, avg)
    old_sq = exp_avg_sq.index_select(0, rows)
    sq = grads.mul(grads).sub_(old_sq).mul_(1 - beta2).add_(old_sq)
    place_rows(exp_avg_sq, rows, sq)
    return avg.div_(sq.sqrt_().add_(opt.eps)).mul_(-step_size)


def _adagrad_delta(state: dict[str, Tensor], rows: Tensor, grads: Tensor,
                   opt: Optimizer) -> Tensor:
    # torch.optim.adagrad's sparse path.
    clr = opt.lr / (1 + (opt.step - 1) * opt.lr_decay)
    sums = state["sum"]
    new_sum = sums.index_select(0, rows).add_(grads.mul(grads))
    place_rows(sums, rows, new_sum)
    std = new_sum.sqrt_().add_(opt.eps)
    return grads.div(std).mul_(-clr)
