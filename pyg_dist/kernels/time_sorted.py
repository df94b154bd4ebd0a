"""Temporal sampling over segments sorted by time once: the server's fast way.

:func:`~pyg_dist.kernels.sample_temporal_segments` narrows every seed's
segment to its past on every call, which touches every entry of the
frontier's segments. A server that keeps, per time attribute, its CSC
entries sorted by time within each destination (:func:`sort_by_time`, once,
as PyG asks of a graph for temporal sampling) finds every seed's past as a
*prefix* of its segment by a binary search per seed; then

* ``"uniform"``: the uniform kernel (:func:`sample_segments`) or the
  weighted one over the prefixes, as if the future did not exist;
* ``"last"``: the last ``k`` entries of each prefix, no draw at all.

Stable sorting keeps CSC order among equal times, so the tail of a prefix
holds the later CSC position of two equal times, the tie rule of
:mod:`.temporal_sample`. Results are the same laws and, for ``"last"``,
the same sets as :func:`sample_temporal_segments`; positions come back in
CSC terms.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from pyg_dist.kernels.neighbor_sample import sample_segments, segment_positions
from pyg_dist.kernels.temporal_sample import check_temporal
from pyg_dist.kernels.weighted_sample import sample_weighted_segments


def sort_by_time(deg: Tensor, entry_time: Tensor) -> tuple[Tensor, Tensor]:
    """Sorts every segment of a CSC by time (stable), once.

    Args:
        deg: int64 length of every destination's segment (all of them,
            in CSC order; the segments tile the entries).
        entry_time: Time of every CSC entry.

    Returns:
        ``(perm, sorted_time)``: the CSC position of every entry of the
        sorted layout, and its time. Segments keep their place and length.
    """
    segment = torch.repeat_interleave(torch.arange(deg.numel(), device=deg.device), deg,
                                      output_size=entry_time.numel())
    by_time = torch.argsort(entry_time, stable=True)
    perm = by_time[torch.argsort(segment[by_time], stable=True)]
    return perm, entry_time.index_select(0, perm)


def past_counts(sorted_time: Tensor, start: Tensor, deg: Tensor, seed_time: Tensor) -> Tensor:
    """How many entries of every time-sorted segment are no later than its
    seed's time: a binary search per seed, all seeds at once.

    Args:
        sorted_time: Times in the layout of :func:`sort_by_time`.
        start: int64 start of every seed's segment.
        deg: int64 length of every seed's segment.
        seed_time: Time of every seed, of ``sorted_time``'s dtype.
    """
    low, high = start.clone(), start + deg
    if deg.numel() == 0 or sorted_time.numel() == 0:
        return deg.clone()
    last = sorted_time.numel() - 1
    for _ in range(int(deg.max()).bit_length() + 1):
        mid = torch.div(low + high, 2, rounding_mode="floor")
        searching = low < high
        go_right = searching & (sorted_time.index_select(0, mid.clamp(max=last)) <= seed_time)
        low = torch.where(go_right, mid + 1, low)
        high = torch.where(searching & ~go_right, mid, high)
    return low - start


def sample_time_sorted(start: Tensor, deg: Tensor, sorted_time: Tensor, perm: Tensor,
                       seed_time: Tensor, num_neighbors: int, strategy: str = "uniform",
                       replace: bool = False, sorted_weight: Optional[Tensor] = None,
                       generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
    """Temporal sampling over time-sorted segments (see the module docstring).

    Args:
        start: int64 start of every seed's segment (CSC and sorted layouts
            share segment bounds).
        deg: int64 length of every seed's segment.
        sorted_time: Entry times in the sorted layout.
        perm: CSC position of every entry of the sorted layout.
        seed_time: Time of every seed, of ``sorted_time``'s dtype.
        num_neighbors: Fan-out ``k``; ``-1`` takes every eligible entry.
        strategy: ``"uniform"`` or ``"last"``.
        replace: Draw with replacement (``"uniform"`` only).
        sorted_weight: Weights in the sorted layout, to draw by weight
            (``"uniform"`` only); weight 0 is never drawn.
        generator: Random generator on the tensors' device.

    Returns:
        ``(counts, positions)``: CSC positions, seed after seed.

    Raises:
        ValueError: as :func:`~pyg_dist.kernels.sample_temporal_segments`.
    """
    check_temporal(strategy, num_neighbors, replace, sorted_weight is not None, seed_time,
                   sorted_time.dtype, deg.numel())
    past = past_counts(sorted_time, start, deg, seed_time)
    if strategy == "last":
        counts = past if num_neighbors == -1 else past.clamp(max=num_neighbors)
        positions = segment_positions(start + past - counts, counts)
    elif sorted_weight is None:
        counts, positions = sample_segments(start, past, num_neighbors, replace, generator)
    else:
        counts, positions = sample_weighted_segments(start, past, sorted_weight,
                                                     num_neighbors, replace, generator)
    return counts, perm.index_select(0, positions)
