"""Exact, vectorised one-hop sampling with probability proportional to edge weight.

Semantics (those of DGL's ``prob`` and of PyG's ``weight_attr``):

* An entry of weight 0 is never drawn, also at full fan-out (``-1``) and
  when a seed has fewer positive entries than the fan-out.
* Without replacement, a seed gets ``min(k, positive entries)`` distinct
  entries, drawn one after another with probability proportional to the
  weight among those not drawn yet (successive sampling). The kernel draws
  that in one go as an exponential race: each entry gets the key
  ``Exp(1) / weight`` and the ``k`` smallest keys of a segment win
  (Efraimidis and Spirakis, 2006): the first to arrive in a race of rates
  ``w_i`` is entry ``i`` with probability ``w_i / sum(w)``, and the race
  goes on among the rest.
* With replacement, each of the ``k`` draws picks entry ``i`` with
  probability ``w_i / sum(w)``: a uniform point in the segment's total
  weight, located in the running sum of weights.

Weights are assumed finite and non-negative; the partition reader and the
loader check that once, so the hot path does not.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from pyg_dist.kernels.candidates import Candidates, eligible, expand

_LATEST = torch.finfo(torch.float64).max
# The padded matrix's top-k beats the two sorts while it holds at most about
# four times the real entries (measured on one core at hop 2 of the bench).
_DENSE_MAX_PADDING = 4
_DENSE_MIN_CELLS = 1024


def positive_entries(start: Tensor, deg: Tensor, weight: Tensor) -> Candidates:
    """Every seed's entries of positive weight.

    Args:
        start: int64 CSC position where every seed's segment starts.
        deg: int64 length of every seed's segment.
        weight: Weight of every CSC entry (indexed by CSC position).
    """
    positions, segment, _ = expand(start, deg)
    return eligible(positions, segment, weight[positions] > 0, deg.numel())


def sample_weighted(candidates: Candidates, weight: Tensor, num_neighbors: int,
                    replace: bool = False,
                    generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
    """Samples up to ``num_neighbors`` entries of every seed by weight.

    Args:
        candidates: Every seed's drawable entries (weight above 0), e.g.
            from :func:`positive_entries`.
        weight: Weight of every CSC entry (indexed by CSC position).
        num_neighbors: Fan-out ``k``; ``-1`` takes every candidate.
        replace: Draw ``k`` entries with replacement.
        generator: Random generator on the tensors' device.

    Returns:
        ``(counts, positions)`` as :func:`~pyg_dist.kernels.sample_neighbors`
        returns them: CSC positions, seed after seed.

    Raises:
        ValueError: if ``num_neighbors < -1``.
    """
    if num_neighbors < -1:
        raise ValueError(f"num_neighbors must be -1 (all) or >= 0, got {num_neighbors}")
    positions, start, deg = candidates
    if num_neighbors == -1 or positions.numel() == 0:
        return deg, positions
    if replace:
        counts, local = _with_replacement(start, deg, weight[positions].double(),
                                          num_neighbors, generator)
        return counts, positions[local]
    if num_neighbors >= int(deg.max()):
        return deg, positions
    return torch.clamp(deg, max=num_neighbors), positions[
        _race(start, deg, weight[positions].double(), num_neighbors, generator)]


def _race(start: Tensor, deg: Tensor, weight: Tensor, k: int,
          generator: Optional[torch.Generator]) -> Tensor:
    """Indices into the candidates of every segment's ``k`` winners."""
    draw = torch.rand(weight.numel(), dtype=torch.float64, device=weight.device,
                      generator=generator)
    # -log(1 - u) is Exp(1) and finite for u in [0, 1); dividing by a
    # positive weight gives the arrival time in a race of rate `weight`.
    # The clamp keeps a denormal weight's key below the padding's infinity.
    key = torch.log1p(-draw).neg_().div_(weight).clamp_(max=_LATEST)
    if deg.numel() * int(deg.max()) <= _DENSE_MAX_PADDING * key.numel() + _DENSE_MIN_CELLS:
        return _first_k_dense(start, deg, key, k)
    return _first_k_sorted(start, deg, key, k)


def _first_k_dense(start: Tensor, deg: Tensor, key: Tensor, k: int) -> Tensor:
    """The ``k`` smallest keys of every segment, through a padded
    ``[segments, max(deg)]`` matrix and a top-k per row: few op launches and
    no sort, while the padding costs less than the sort it saves."""
    _, segment, offset = expand(start, deg)
    matrix = key.new_full((deg.numel(), int(deg.max())), math.inf)
    matrix[segment, offset] = key
    picked = matrix.topk(k, dim=1, largest=False).indices
    return (start.unsqueeze(1) + picked)[picked < deg.unsqueeze(1)]


def _first_k_sorted(start: Tensor, deg: Tensor, key: Tensor, k: int) -> Tensor:
    """The ``k`` smallest keys of every segment, by two stable sorts: by key,
    then by segment, so segments keep their place and length and
    rank-in-segment after the sort is the offset again."""
    _, segment, offset = expand(start, deg)
    by_key = torch.argsort(key, stable=True)
    order = by_key[torch.argsort(segment[by_key], stable=True)]
    return order[offset < k]


def _with_replacement(start: Tensor, deg: Tensor, weight: Tensor, k: int,
                      generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    counts = torch.where(deg > 0, k, 0)
    total = int(counts.sum())
    # A draw is a uniform point in its segment's stretch of the running sum
    # of all candidates' weights, located by binary search; candidates of
    # weight 0 were left out, so every stretch is one entry's own weight.
    # float64 keeps a weight of 1e-9 of the frontier's total distinct.
    cumulative = torch.cumsum(weight, 0)
    base = torch.where(start > 0, cumulative[(start - 1).clamp(min=0)],
                       cumulative.new_zeros(()))
    seg_total = torch.where(deg > 0, cumulative[(start + deg - 1).clamp(min=0)] - base, 0)
    draw = torch.rand(total, dtype=torch.float64, device=weight.device, generator=generator)
    target = torch.repeat_interleave(base, counts, output_size=total) + \
        draw * torch.repeat_interleave(seg_total, counts, output_size=total)
    picked = torch.searchsorted(cumulative, target, right=True)
    # Rounding can put the point at the segment's very end: keep it inside.
    last = torch.repeat_interleave(start + deg - 1, counts, output_size=total)
    return counts, torch.minimum(picked, last)
