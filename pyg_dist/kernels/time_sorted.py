"""Exact, vectorised one-hop temporal sampling: no neighbour from a seed's future.

Semantics (PyG's ``time_attr`` with disjoint sampling): every seed carries a
time (the input time of the root it was sampled for), and only entries whose
time is at most that seed's time may be drawn. The entry's time is the time
of the neighbour node (``time_attr`` on nodes) or of the edge (on edges).
Among the eligible entries:

* ``"uniform"``: a uniform ``min(k, eligible)``-subset (or ``k`` draws with
  replacement), or by weight when weights are given (:mod:`.weighted_sample`);
* ``"last"``: the ``k`` most recent; among entries of equal time the later
  CSC position counts as more recent, which is what taking the tail of a
  neighbourhood sorted by time (PyG's way) gives.

The server keeps, per time attribute, its CSC entries sorted by time within
each destination (:func:`sort_by_time`, once, as PyG asks of a graph for
temporal sampling), so every seed's past is a *prefix* of its segment,
found by a binary search per seed (:func:`past_counts`); then "uniform" is
the uniform kernel (:func:`sample_segments`) or the weighted one over the
prefixes, as if the future did not exist, and "last" the last ``k`` entries
of each prefix, no draw at all. Stable sorting keeps CSC order among equal
times, so the tail of a prefix holds the later CSC position of two equal
times. Positions come back in CSC terms.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from pyg_dist.kernels.neighbor_sample import check_fanout, sample_segments, segment_positions
from pyg_dist.kernels.weighted_sample import sample_weighted_segments

TEMPORAL_STRATEGIES = ("uniform", "last")


def check_temporal(strategy: str, num_neighbors: int, replace: bool, weighted: bool,
                   seed_time: Tensor, time_dtype: torch.dtype, num_seeds: int) -> None:
    """``ValueError`` for an unknown strategy, ``"last"`` with replacement
    or weights, ``num_neighbors < -1``, times of different dtypes, or not
    one seed time per seed."""
    if strategy not in TEMPORAL_STRATEGIES:
        raise ValueError(f"temporal strategy must be one of {TEMPORAL_STRATEGIES}, "
                         f"got {strategy!r}")
    check_fanout(num_neighbors)
    if strategy == "last" and (replace or weighted):
        raise ValueError("temporal strategy 'last' takes the most recent neighbours: "
                         "it cannot draw with replacement or by weight")
    if seed_time.dtype != time_dtype:
        raise ValueError(f"seed times ({seed_time.dtype}) and entry times "
                         f"({time_dtype}) must have the same dtype")
    if seed_time.numel() != num_seeds:
        raise ValueError(f"got {seed_time.numel()} seed times for {num_seeds} seeds")


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
    """Samples up to ``num_neighbors`` of every seed's entries from its past,
    over time-sorted segments (see the module docstring).

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
        ValueError: as :func:`check_temporal` says.
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
