"""Sparse optimisers whose steps the partition servers apply.

Used like torch's::

    opt = pyg_dist.optim.SparseAdam([emb], lr=0.01)
    opt.zero_grad(); loss.backward(); opt.step()

:meth:`DistSparseOptimizer.step` takes each embedding's gradient since its
last ``zero_grad`` (one row per distinct id) and sends it to the servers
owning the rows, one ``emb_push`` per server, without waiting: the
embedding's next read waits for them, so the pushes overlap whatever the
trainer does in between (the model's step, the loader's next sample). The
servers keep the per-row state (Adam's moments, Adagrad's sums) beside the
rows; the trainer keeps the step count, as torch keeps one per parameter.
With one trainer the steps equal torch's ``SGD`` / ``SparseAdam`` /
``Adagrad`` on ``nn.Embedding(sparse=True)``; with several, see
docs/embeddings.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from pyg_dist.embedding.dist_embedding import DistEmbedding
from pyg_dist.errors import EmbeddingError


def _positive(name: str, value: float, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise EmbeddingError(f"{name} must be a finite number "
                             f"{'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


class DistSparseOptimizer:
    """The shared part of the optimisers: embeddings, step counts, pushes.

    Args:
        params: The :class:`~pyg_dist.DistEmbedding` tables it updates.
        kind: The server's name of the update (``sgd``, ``adam``, ``adagrad``).
        hyper: Its hyper-parameters, as sent in every push.
    """

    kind = ""

    def __init__(self, params: Iterable[DistEmbedding], **hyper: Any) -> None:
        self.params = list(params)
        if not self.params or not all(isinstance(p, DistEmbedding) for p in self.params):
            raise EmbeddingError(f"{type(self).__name__} takes a non-empty list of "
                                 f"pyg_dist.DistEmbedding tables (dense parameters go to a "
                                 f"torch optimiser)")
        self.hyper = hyper
        self.steps = {id(p): 0 for p in self.params}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forgets every table's recorded rows and gradients."""
        for p in self.params:
            p.zero_grad()

    def step(self) -> None:
        """Sends each table's gradient to its servers (one push per server);
        tables without a gradient are left alone (their step count too)."""
        for p in self.params:
            gradient = p.gradient()
            if gradient is None:
                continue
            self.steps[id(p)] += 1
            spec = {"kind": self.kind, **self.hyper, "step": self.steps[id(p)]}
            p.push(spec, *gradient)

    def flush(self) -> None:
        """Waits until every step sent was applied (raises the first error)."""
        for p in self.params:
            p.flush()

    def state_dict(self) -> dict[str, Any]:
        """Hyper-parameters and step counts (the per-row state is the
        servers', in their checkpoints)."""
        return {"kind": self.kind, "hyper": dict(self.hyper),
                "steps": {p.name: self.steps[id(p)] for p in self.params}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s step counts."""
        for p in self.params:
            self.steps[id(p)] = int(state["steps"].get(p.name, 0))


class SGD(DistSparseOptimizer):
    """Plain sparse SGD (``w -= lr * g`` on the rows a step touched), as
    ``torch.optim.SGD`` on a sparse gradient.

    Args:
        params: The tables.
        lr: Learning rate.
    """

    kind = "sgd"

    def __init__(self, params: Iterable[DistEmbedding], lr: float) -> None:
        super().__init__(params, lr=_positive("lr", lr))


class SparseAdam(DistSparseOptimizer):
    """``torch.optim.SparseAdam`` on the servers: moments kept per row,
    updated only for the rows a step touched; bias correction by this
    trainer's step count.

    Args:
        params: The tables.
        lr: Learning rate.
        betas: ``(beta1, beta2)``.
        eps: Added to the denominator.
    """

    kind = "adam"

    def __init__(self, params: Iterable[DistEmbedding], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise EmbeddingError(f"betas must be two numbers in [0, 1), got {betas!r}")
        super().__init__(params, lr=_positive("lr", lr), betas=[float(b) for b in betas],
                         eps=_positive("eps", eps))


class SparseAdagrad(DistSparseOptimizer):
    """``torch.optim.Adagrad`` on a sparse gradient, on the servers: sums of
    squared gradients kept per row.

    Args:
        params: The tables.
        lr: Learning rate.
        lr_decay: Learning-rate decay per step.
        initial_accumulator_value: First value of every row's sums.
        eps: Added to the denominator.
    """

    kind = "adagrad"

    def __init__(self, params: Iterable[DistEmbedding], lr: float = 1e-2,
                 lr_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10) -> None:
        super().__init__(params, lr=_positive("lr", lr),
                         lr_decay=_positive("lr_decay", lr_decay, True),
                         initial_accumulator_value=_positive(
                             "initial_accumulator_value", initial_accumulator_value, True),
                         eps=_positive("eps", eps))
