"""Exact, vectorised one-hop neighbour sampling over a CSC topology.

The kernel works on positions into the CSC arrays, so the caller maps them
to whatever it stores per entry (``row[positions]`` are the sampled
neighbours, ``edge_ids[positions]`` their edge ids). Everything is a handful
of torch ops over all seeds at once, with no Python loop over seeds, and it
runs on whichever device ``colptr`` lives on.

Without replacement every seed gets a uniformly random subset of
``min(degree, k)`` of its entries: each of its entries draws a random key
and the ``k`` smallest keys of its segment win (one sort over all candidates;
for a small frontier a top-k over a padded seeds x max-degree matrix, fewer
op launches; for a big one Floyd's algorithm, see :func:`_floyd`). With
replacement each of the ``k`` draws picks ``floor(u * degree)``.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from pyg_dist.kernels.candidates import expand


def check_fanout(num_neighbors: int) -> None:
    """Raises ``ValueError`` unless ``num_neighbors`` is -1 or at least 0."""
    if num_neighbors < -1:
        raise ValueError(f"num_neighbors must be -1 (all) or >= 0, got {num_neighbors}")


def segment_positions(starts: Tensor, counts: Tensor) -> Tensor:
    """Concatenates the segments ``[starts[i], starts[i] + counts[i])``: every
    CSC position of every seed, or the rows of every server's answer.

    Args:
        starts: Start offset of every segment (int64).
        counts: Length of every segment (int64, non-negative).

    Returns:
        An int64 tensor of length ``counts.sum()``, on ``counts``' device.
    """
    total = int(counts.sum())
    # Position of each element inside its own segment, plus the start of
    # that segment: arange(total) - offset + start, with one
    # repeat_interleave of (start - offset) rather than one of each.
    shift = starts - (torch.cumsum(counts, 0) - counts)
    return torch.arange(total, device=counts.device).add_(
        shift.repeat_interleave(counts, output_size=total))


def _with_replacement(start: Tensor, deg: Tensor, k: int,
                      generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    counts = torch.where(deg > 0, k, 0)
    total = int(counts.sum())
    start_rep = torch.repeat_interleave(start, counts, output_size=total)
    deg_rep = torch.repeat_interleave(deg, counts, output_size=total)
    draw = torch.rand(total, dtype=torch.float64, device=deg.device, generator=generator)
    # float64 keeps floor(u * deg) exact and below deg for any real degree;
    # the clamp guards the theoretical u == 1 - eps rounding.
    offset = torch.minimum((draw * deg_rep).long(), deg_rep - 1)
    return counts, start_rep + offset


def _without_replacement(start: Tensor, deg: Tensor, k: int,
                         generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    # One sort over every candidate entry: few kernel launches, which is
    # what small batches pay for, and still O(E log E) for big ones.
    positions, segment, offset = expand(start, deg)
    # key = segment + u/2 in [segment, segment + 0.5): sorting keeps segments
    # apart and in order (no rounding reaches the next one) and shuffles
    # inside each; the first k of every segment are a uniform k-subset.
    key = torch.rand(positions.numel(), dtype=torch.float64, device=deg.device,
                     generator=generator).mul_(0.5).add_(segment)
    order = torch.argsort(key)
    # Segments keep their place and length, so rank-in-segment after the
    # sort is the same ``offset`` array as before it.
    return torch.clamp(deg, max=k), positions[order][offset < k]


def _floyd(start: Tensor, deg: Tensor, k: int,
           generator: Optional[torch.Generator]) -> Tensor:
    """A uniform ``k``-subset of every segment (all of ``deg > k``), by Floyd.

    Robert Floyd's algorithm, vectorised over segments: for ``j`` from
    ``deg - k`` to ``deg - 1`` draw ``t`` uniform in ``[0, j]`` and keep it,
    or ``j`` itself if ``t`` was already kept. Every ``k``-subset comes out
    equally likely, with ``k`` steps of a few ops over the segments instead of
    a sort over all of their entries: what pays for big frontiers.

    Returns:
        A ``[len(deg), k]`` tensor of CSC positions, one row per segment.
    """
    n = deg.numel()
    draw = torch.rand((k, n), dtype=torch.float64, device=deg.device, generator=generator)
    chosen = torch.empty((k, n), dtype=torch.long, device=deg.device)
    low = deg - k
    for j in range(k):
        bound = low + j  # the draw of step j lies in [0, bound]
        pick = draw[j].mul_(bound + 1).long()
        if j:
            taken = (chosen[:j] == pick).any(0)
            pick = torch.where(taken, bound, pick)
        chosen[j] = pick
    return chosen.t_().add_(start.unsqueeze(1))


def _without_replacement_dense(start: Tensor, deg: Tensor, k: int, width: int,
                               generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    """A uniform ``min(degree, k)``-subset of every segment, through a padded
    ``[segments, width]`` matrix of random keys (``width >= max(deg)``).

    Each segment's real entries get keys in ``[0, 1)``, the padding 2, and
    the ``k`` smallest keys of a row win: the real entries always come first
    and a uniform subset of them when there are more than ``k``. About half
    as many op launches as the sort, which is what a small frontier (a few
    seeds, as in most requests of a sampling hop) pays for.
    """
    keys = torch.rand((deg.numel(), width), dtype=torch.float64, device=deg.device,
                      generator=generator)
    keys.masked_fill_(torch.arange(width, device=deg.device) >= deg.unsqueeze(1), 2.0)
    # Ascending keys: a row's real entries first, then padding (key 2) where
    # the degree is below k. The keys tell which is which in one op.
    keys, picked = keys.topk(k, dim=1, largest=False)
    return torch.clamp(deg, max=k), picked.add_(start.unsqueeze(1))[keys < 2.0]


# Floyd's k steps cost ~8 op launches each, over the segments; the sort costs
# a handful of launches plus O(E log E) over all E candidate entries. Floyd
# pays once a frontier offers more candidates than this per fan-out step
# (measured crossover: ~500 on one core, for k from 10 to 50).
_FLOYD_MIN_CANDIDATES_PER_STEP = 512
_FLOYD_MAX_K = 64
# The dense kernel pads every segment to the widest one; it pays while the
# padded matrix stays within about twice the real entries (measured on one
# core: 30 against 46 us for 16 seeds of degree ~10, 126 against 167 us for
# 256, even with sort at 512).
_DENSE_MAX_PADDING = 2
_DENSE_MIN_CELLS = 1024


def _without_replacement_floyd(start: Tensor, deg: Tensor, k: int,
                               generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    counts = torch.clamp(deg, max=k)
    offset = torch.arange(k, device=deg.device).expand(deg.numel(), k)
    positions = start.unsqueeze(1) + offset
    big = (deg > k).nonzero().view(-1)
    positions[big] = _floyd(start[big], deg[big], k, generator)
    return counts, positions[offset < counts.unsqueeze(1)]


def sample_segments(start: Tensor, deg: Tensor, num_neighbors: int, replace: bool = False,
                    generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
    """Samples up to ``num_neighbors`` CSC entries for every seed's segment.

    The caller looks every seed's segment up and checks it (a server needs
    the degrees anyway, to bound its reply), so nothing is validated or
    looked up twice.

    Args:
        start: int64 CSC position where every seed's segment starts
            (repeated seeds are sampled independently).
        deg: int64 length of every seed's segment.
        num_neighbors: Fan-out ``k``. ``-1`` takes every entry, in CSC order;
            without replacement a seed with ``degree <= k`` gets all of its
            entries too (in CSC order if that holds for every seed).
        replace: Draw ``k`` entries with replacement (a seed without entries
            gets none) instead of a ``min(degree, k)``-subset.
        generator: Random generator on ``deg``'s device, for reproducible
            draws.

    Returns:
        ``(counts, positions)``: ``counts[i]`` entries were sampled for
        seed ``i``; ``positions`` holds them seed after seed, as indices
        into the CSC arrays (``row[positions]``, ``edge_ids[positions]``).
    """
    if num_neighbors == -1 or deg.numel() == 0:
        return deg, segment_positions(start, deg)
    if replace:
        return _with_replacement(start, deg, num_neighbors, generator)
    width = int(deg.max())
    if num_neighbors >= width:
        return deg, segment_positions(start, deg)
    cells = deg.numel() * width
    # The candidates never outnumber the cells, so a matrix this small rules
    # Floyd out and the dense kernel in without counting them (two ops
    # fewer, on the requests where ops cost more than work).
    if cells <= _DENSE_MIN_CELLS and cells < _FLOYD_MIN_CANDIDATES_PER_STEP * num_neighbors:
        return _without_replacement_dense(start, deg, num_neighbors, width, generator)
    total = int(deg.sum())
    if num_neighbors <= _FLOYD_MAX_K and total >= _FLOYD_MIN_CANDIDATES_PER_STEP * num_neighbors:
        return _without_replacement_floyd(start, deg, num_neighbors, generator)
    if cells <= _DENSE_MAX_PADDING * total + _DENSE_MIN_CELLS:
        return _without_replacement_dense(start, deg, num_neighbors, width, generator)
    return _without_replacement(start, deg, num_neighbors, generator)
