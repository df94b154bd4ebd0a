"""Restricting every seed's CSC segment to the entries it may draw from.

Weighted sampling never draws an entry of weight 0 and temporal sampling
never one from a seed's future; both first narrow each segment to its
eligible entries and then sample within what is left. :func:`eligible`
does the narrowing once, over all seeds, and returns the survivors as new
contiguous segments, so the samplers (uniform, weighted, most recent) work
on plain ``(start, deg)`` segments again and their results map back to CSC
positions with one gather.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Candidates(NamedTuple):
    """The eligible entries of every seed, as contiguous segments.

    Attributes:
        positions: CSC positions of the eligible entries, seed after seed and
            in CSC order within a seed.
        start: Where every seed's segment starts in :attr:`positions`.
        deg: How many eligible entries every seed has.
    """

    positions: Tensor
    start: Tensor
    deg: Tensor


def expand(start: Tensor, deg: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Every CSC position of every seed, seed by seed, in CSC order.

    Args:
        start: int64 CSC position where every seed's segment starts.
        deg: int64 length of every seed's segment.

    Returns:
        ``(positions, segment, offset)``: the CSC position of every entry,
        the index of the seed it belongs to, and its offset within the
        seed's segment.
    """
    total = int(deg.sum())
    segment = torch.repeat_interleave(
        torch.arange(deg.numel(), device=deg.device), deg, output_size=total)
    offset = torch.arange(total, device=deg.device) - (torch.cumsum(deg, 0) - deg)[segment]
    return start[segment] + offset, segment, offset


def eligible(positions: Tensor, segment: Tensor, keep: Tensor, num_seeds: int) -> Candidates:
    """Keeps the entries ``keep`` marks, as new contiguous segments.

    Args:
        positions: CSC positions from :func:`expand`.
        segment: Their seeds, from :func:`expand` (non-decreasing).
        keep: bool, one per entry: whether it may be drawn.
        num_seeds: Number of seeds (a seed may lose every entry).

    Returns:
        The surviving entries as :class:`Candidates`.
    """
    kept = positions[keep]
    deg = torch.bincount(segment[keep], minlength=num_seeds)
    return Candidates(kept, torch.cumsum(deg, 0) - deg, deg)
