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

Two ways to the same draws: a padded ``[seeds, max degree]`` matrix with a
top-k or a binary search per row (few op launches, no sort), or, when the
padding would cost more than it saves (a hub among leaves), the eligible
entries narrowed into segments (:mod:`.candidates`) and sorted.

Weights are assumed finite and non-negative; the partition reader and the
loader check that once, so the hot path does not.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from pyg_dist.kernels.candidates import (
    Candidates,
    dense_fits,
    eligible,
    expand,
    gather,
    padded,
)

# Races run in float32 when the weights are float32 at most (half the
# memory traffic, and float32 random numbers and logarithms cost a third of
# float64's); draws with replacement locate points in running sums, which
# need float64 to keep a tiny weight's stretch distinct.
_RACE32 = (torch.float32, torch.float16, torch.bfloat16)


def race_dtype(weight: Optional[Tensor], replace: bool) -> torch.dtype:
    """The float dtype a draw over these weights runs in."""
    if replace or weight is None or weight.dtype not in _RACE32:
        return torch.float64 if replace or weight is not None else torch.float32
    return torch.float32


def check_fanout(num_neighbors: int) -> None:
    """Raises ``ValueError`` unless ``num_neighbors`` is -1 or at least 0."""
    if num_neighbors < -1:
        raise ValueError(f"num_neighbors must be -1 (all) or >= 0, got {num_neighbors}")


def sample_weighted_segments(start: Tensor, deg: Tensor, weight: Tensor, num_neighbors: int,
                             replace: bool = False, generator: Optional[torch.Generator] = None,
                             dense: Optional[bool] = None) -> tuple[Tensor, Tensor]:
    """Samples up to ``num_neighbors`` entries of every seed by weight.

    Args:
        start: int64 CSC position where every seed's segment starts.
        deg: int64 length of every seed's segment.
        weight: Weight of every CSC entry (indexed by CSC position).
        num_neighbors: Fan-out ``k``; ``-1`` takes every positive entry.
        replace: Draw ``k`` entries with replacement.
        generator: Random generator on the tensors' device.
        dense: Force the padded-matrix (``True``) or the sparse (``False``)
            way; ``None`` picks the cheaper one. Both draw the same law.

    Returns:
        ``(counts, positions)`` as :func:`~pyg_dist.kernels.sample_neighbors`
        returns them: CSC positions, seed after seed.

    Raises:
        ValueError: if ``num_neighbors < -1``.
    """
    check_fanout(num_neighbors)
    if deg.numel() == 0 or int(deg.max()) == 0:
        return torch.zeros_like(deg), deg.new_empty(0)
    width = int(deg.max())
    if num_neighbors != -1 and (dense if dense is not None else dense_fits(deg, width)):
        positions, real = padded(start, deg, width, weight.numel())
        rates = torch.where(real, gather(weight, positions).to(race_dtype(weight, replace)),
                            0.0)
        return draw_by_rate(positions, rates, num_neighbors, replace, generator)
    candidates = _positive(start, deg, weight)
    return sample_candidates(candidates, weight[candidates.positions].double(),
                             num_neighbors, replace, generator)


def draw_by_rate(positions: Tensor, rates: Tensor, k: int, replace: bool,
                 generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    """Draws ``k`` cells of every row by rate, over padded rows.

    Args:
        positions: ``[seeds, width]`` CSC position of every cell.
        rates: ``[seeds, width]`` float weight of every cell; 0 where the
            cell must not be drawn (padding, a weight of 0, the future).
        k: Fan-out (at least 0).
        replace: Draw with replacement.
        generator: Random generator on the tensors' device.

    Returns:
        ``(counts, positions)``: CSC positions, seed after seed.
    """
    n, width = rates.shape
    drawable = rates > 0
    available = drawable.sum(1)
    if replace:
        counts = torch.where(available > 0, k, 0)
        running = torch.cumsum(rates, 1, dtype=torch.float64)
        draw = torch.rand((n, k), dtype=torch.float64, device=rates.device, generator=generator)
        # right=True skips cells of rate 0: their running sum equals the
        # previous cell's, so no point lands on them.
        picked = torch.searchsorted(running, draw.mul_(running[:, -1:]), right=True)
        # Rounding can put a point at the row's very end: keep it on the
        # last drawable cell.
        last = width - 1 - torch.argmax(drawable.flip(1).to(torch.uint8), dim=1)
        picked = torch.minimum(picked, last.unsqueeze(1))
        return counts, positions.gather(1, picked)[available > 0].view(-1)
    k = min(k, width)
    draw = torch.rand((n, width), dtype=rates.dtype, device=rates.device, generator=generator)
    # -log(1 - u) is Exp(1) and finite for u in [0, 1); divided by the rate it
    # is the arrival time in a race of that rate (inf for a rate of 0). The
    # clamp keeps a denormal rate's time below the never-drawn cells'.
    arrival = torch.log1p(draw.neg_()).neg_().div_(rates).clamp_(
        max=torch.finfo(rates.dtype).max)
    arrival.masked_fill_(~drawable, math.inf)
    picked = arrival.topk(k, dim=1, largest=False).indices  # earliest first
    counts = torch.clamp(available, max=k)
    first = torch.arange(k, device=rates.device) < counts.unsqueeze(1)
    return counts, positions.gather(1, picked)[first]


def _positive(start: Tensor, deg: Tensor, weight: Tensor) -> Candidates:
    positions, segment, _ = expand(start, deg)
    return eligible(positions, segment, weight.index_select(0, positions) > 0, deg.numel())


def sample_candidates(candidates: Candidates, rates: Tensor, k: int, replace: bool,
                      generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    """:func:`draw_by_rate` over narrowed segments (the sparse way).

    Args:
        candidates: Every seed's drawable entries.
        rates: float64 positive weight of every candidate.
        k: Fan-out; ``-1`` takes every candidate.
        replace: Draw with replacement.
        generator: Random generator on the tensors' device.
    """
    positions, start, deg = candidates
    if k == -1 or positions.numel() == 0:
        return deg, positions
    if replace:
        counts, local = _with_replacement(start, deg, rates, k, generator)
        return counts, positions[local]
    if k >= int(deg.max()):
        return deg, positions
    return torch.clamp(deg, max=k), positions[_race(start, deg, rates, k, generator)]


def _race(start: Tensor, deg: Tensor, rates: Tensor, k: int,
          generator: Optional[torch.Generator]) -> Tensor:
    """Indices into the candidates of every segment's ``k`` earliest
    arrivals, by two stable sorts: by arrival, then by segment, so segments
    keep their place and length and rank-in-segment is the offset again."""
    _, segment, offset = expand(start, deg)
    draw = torch.rand(rates.numel(), dtype=torch.float64, device=rates.device,
                      generator=generator)
    arrival = torch.log1p(-draw).neg_().div_(rates)
    by_arrival = torch.argsort(arrival, stable=True)
    order = by_arrival[torch.argsort(segment[by_arrival], stable=True)]
    return order[offset < k]


def _with_replacement(start: Tensor, deg: Tensor, rates: Tensor, k: int,
                      generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    counts = torch.where(deg > 0, k, 0)
    total = int(counts.sum())
    # A draw is a uniform point in its segment's stretch of the running sum
    # of all candidates' rates, located by binary search; every candidate's
    # rate is positive, so every stretch is one candidate's own. float64
    # keeps a rate of 1e-9 of the frontier's total distinct.
    running = torch.cumsum(rates, 0)
    base = torch.where(start > 0, running[(start - 1).clamp(min=0)], running.new_zeros(()))
    seg_total = torch.where(deg > 0, running[(start + deg - 1).clamp(min=0)] - base, 0)
    draw = torch.rand(total, dtype=torch.float64, device=rates.device, generator=generator)
    target = torch.repeat_interleave(base, counts, output_size=total) + \
        draw * torch.repeat_interleave(seg_total, counts, output_size=total)
    picked = torch.searchsorted(running, target, right=True)
    last = torch.repeat_interleave(start + deg - 1, counts, output_size=total)
    return counts, torch.minimum(picked, last)
