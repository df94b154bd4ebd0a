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

Several ways to the same draws: a padded ``[seeds, max degree]`` matrix
with a top-k or a binary search per row (few op launches, no sort; small
frontiers); for big frontiers without replacement, seeds with at most ``k``
entries take their positive ones without a race and the others race in
groups of similar degree (:func:`race_grouped`: little padding, whatever
the degree spread); the eligible entries narrowed into segments
(:mod:`.candidates`) and sorted (``-1`` and, with replacement, frontiers
with a hub among leaves); and, with replacement over whole columns, the
part's alias tables (:mod:`.alias`, O(1) a draw).

Weights are assumed finite and non-negative; the partition reader and the
loader check that once, so the hot path does not.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from pyg_dist.kernels.alias import AliasTable, sample_alias
from pyg_dist.kernels.candidates import (
    Candidates,
    dense_fits,
    eligible,
    expand,
    gather,
    padded,
)
from pyg_dist.kernels.neighbor_sample import check_fanout

# Races run in float32 when the weights are float32 at most (half the
# memory traffic, and float32 random numbers and logarithms cost a third of
# float64's); draws with replacement locate points in running sums, which
# need float64 to keep a tiny weight's stretch distinct.
_RACE32 = (torch.float32, torch.float16, torch.bfloat16)


def race_dtype(weight: Tensor, replace: bool) -> torch.dtype:
    """The float dtype a draw over these weights runs in."""
    return torch.float32 if not replace and weight.dtype in _RACE32 else torch.float64


def sample_weighted_segments(start: Tensor, deg: Tensor, weight: Tensor, num_neighbors: int,
                             replace: bool = False, generator: Optional[torch.Generator] = None,
                             dense: Optional[bool] = None,
                             alias: Optional[AliasTable] = None) -> tuple[Tensor, Tensor]:
    """Samples up to ``num_neighbors`` entries of every seed by weight.

    Args:
        start: int64 CSC position where every seed's segment starts.
        deg: int64 length of every seed's segment.
        weight: Weight of every CSC entry (indexed by CSC position).
        num_neighbors: Fan-out ``k``; ``-1`` takes every positive entry.
        replace: Draw ``k`` entries with replacement.
        generator: Random generator on the tensors' device.
        dense: Force one padded matrix (``True``) or the sparse way
            (``False``); ``None`` picks the cheapest way. All draw the same
            law.
        alias: The alias tables of ``weight`` (:func:`~pyg_dist.kernels.
            build_alias_table`), for draws with replacement when every
            segment is a whole CSC column (as a server's are); ignored
            otherwise.

    Returns:
        ``(counts, positions)`` as :func:`~pyg_dist.kernels.sample_segments`
        returns them: CSC positions, seed after seed.

    Raises:
        ValueError: if ``num_neighbors < -1``.
    """
    check_fanout(num_neighbors)
    if deg.numel() == 0 or int(deg.max()) == 0:
        return torch.zeros_like(deg), deg.new_empty(0)
    if replace and alias is not None and num_neighbors != -1:
        return sample_alias(start, deg, alias, num_neighbors, generator)
    width = int(deg.max())
    if num_neighbors != -1 and dense is None and not replace and \
            deg.numel() * width > GROUP_MIN_CELLS:
        return race_grouped(start, deg, weight, num_neighbors, generator)
    if num_neighbors != -1 and (dense if dense is not None else dense_fits(deg, width)):
        positions, real = padded(start, deg, width, weight.numel())
        rates = torch.where(real, gather(weight, positions).to(race_dtype(weight, replace)),
                            0.0)
        return draw_by_rate(positions, rates, num_neighbors, replace, generator)
    candidates = _positive(start, deg, weight)
    return sample_candidates(candidates, weight[candidates.positions].double(),
                             num_neighbors, replace, generator)


# Without replacement, frontiers of more cells than this race in groups of
# similar degree, the widest row of a group at most GROUP_RATIO times its
# narrowest: a padded matrix per group (few wasted cells, and torch's
# row-wise top-k costs about as much per row as per cell) instead of one
# matrix as wide as the widest seed. Measured on the bench graph's second
# hop: 1.4 against 1.25 and 1.6 within noise, one matrix 40% slower.
GROUP_MIN_CELLS = 4096
GROUP_RATIO = 1.4


def _groups(deg: Tensor, k: int) -> list[tuple[Tensor, int]]:
    """Seeds by degree: those with at most ``k`` entries first, then groups
    of degrees in ``(b_i, b_(i+1)]`` for bounds growing by GROUP_RATIO;
    ``(seed indices, width)`` for every non-empty group."""
    bounds = [k]
    top = int(deg.max())
    while bounds[-1] < top:
        bounds.append(max(bounds[-1] + 1, math.ceil(bounds[-1] * GROUP_RATIO)))
    group = torch.bucketize(deg, torch.tensor(bounds, device=deg.device))
    sizes = torch.bincount(group, minlength=len(bounds)).tolist()
    widths = torch.zeros(len(bounds), dtype=deg.dtype, device=deg.device).scatter_reduce_(
        0, group, deg, reduce="amax").tolist()
    return [((group == g).nonzero().view(-1), widths[g])
            for g, size in enumerate(sizes) if size]


def race_grouped(start: Tensor, deg: Tensor, weight: Tensor, k: int,
                 generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    """Weighted sampling without replacement, group by group (see
    GROUP_MIN_CELLS): a seed with at most ``k`` entries takes every positive
    one (no race needed), the others race within their group's matrix.

    Args:
        start: int64 CSC position where every seed's segment starts.
        deg: int64 length of every seed's segment.
        weight: Weight of every CSC entry.
        k: Fan-out (at least 0).
        generator: Random generator on the tensors' device.

    Returns:
        ``(counts, positions)``: CSC positions, seed after seed.
    """
    n, cols = deg.numel(), min(k, int(deg.max()))
    picked = torch.empty((n, cols), dtype=torch.long, device=deg.device)
    valid = torch.empty((n, cols), dtype=torch.bool, device=deg.device)
    dtype = race_dtype(weight, False)
    for rows, width in _groups(deg, k):
        first = start.index_select(0, rows)
        columns = torch.arange(width, device=deg.device)
        padding = columns >= deg.index_select(0, rows).unsqueeze(1)
        rates = _rows_of(weight, first, width).to(dtype)
        if width <= k:  # every positive entry, in CSC order
            chosen, ok = first.unsqueeze(1) + columns, (rates > 0).logical_and_(~padding)
            if width < cols:
                chosen = torch.nn.functional.pad(chosen, (0, cols - width))
                ok = torch.nn.functional.pad(ok, (0, cols - width))
        else:
            won, ok = _race_rows(rates, k, generator, padding)
            chosen = won.add_(first.unsqueeze(1))
        picked.index_copy_(0, rows, chosen)
        valid.index_copy_(0, rows, ok)
    return valid.sum(1), picked.masked_select(valid)


def _rows_of(values: Tensor, first: Tensor, width: int) -> Tensor:
    """``values[first[i] + j]`` for ``j < width`` as a ``[len(first), width]``
    matrix (cells past the end of ``values`` hold anything). Copies ``width``
    consecutive values a row (a view's rows), several times faster than
    gathering cell by cell."""
    size = values.numel()
    if size >= width and (first.numel() == 0 or int(first.max()) <= size - width):
        return values.unfold(0, width, 1).index_select(0, first)
    columns = torch.arange(width, device=first.device)
    return gather(values, (first.unsqueeze(1) + columns).clamp_(max=max(size - 1, 0)))


def _race_rows(rates: Tensor, k: int, generator: Optional[torch.Generator],
               padding: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """The ``k`` winners of every row's race (``k < width``): their columns
    and whether each is a real winner (a row with fewer than ``k`` drawable
    cells fills up with cells that are not). Cells of rate 0 and those
    ``padding`` marks never win."""
    # log(u) for u uniform in [0, 1) is minus an Exp(1); divided by the
    # rate it is minus the arrival time in a race of that rate, so the k
    # largest keys win. The clamp keeps a denormal rate's key (and u = 0,
    # probability 2^-24) above the never-drawn cells' -inf.
    keys = torch.rand(rates.shape, dtype=rates.dtype, device=rates.device,
                      generator=generator).log_().div_(rates).clamp_(
        min=-torch.finfo(rates.dtype).max)
    never = rates <= 0
    if padding is not None:
        never.logical_or_(padding)
    keys.masked_fill_(never, -math.inf)
    # Every key is -0.0 or below (never NaN), and such floats order
    # backwards as integers of their width (sign and magnitude): the k
    # smallest integers are the k largest keys, found by torch's integer
    # top-k, which spares the float comparator's NaN checks (~10%).
    as_int = torch.int32 if keys.dtype == torch.float32 else torch.int64
    won = keys.view(as_int).topk(k, dim=1, largest=False, sorted=False).indices
    return won, keys.gather(1, won) > -math.inf


def draw_by_rate(positions: Tensor, rates: Tensor, k: int, replace: bool,
                 generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    """Draws ``k`` cells of every row by rate, over padded rows.

    Args:
        positions: ``[seeds, width]`` CSC position of every cell.
        rates: ``[seeds, width]`` float weight of every cell; 0 where the
            cell must not be drawn (padding, a weight of 0).
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
    if k >= width:  # every drawable cell
        return available, positions[drawable]
    won, ok = _race_rows(rates, k, generator)
    return ok.sum(1), positions.gather(1, won)[ok]


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
