"""Restricting every seed's CSC segment to the entries it may draw from.

Weighted sampling never draws an entry of weight 0: where a padded matrix
costs too much it first narrows each segment to its eligible entries and
then samples within what is left. :func:`eligible` does the narrowing once,
over all seeds, and returns the survivors as new contiguous segments, so
the samplers work on plain ``(start, deg)`` segments again and their
results map back to CSC positions with one gather.
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


# A padded [seeds, max degree] matrix beats expanding the segments (and the
# sorts the sparse path needs) while it holds at most about this many times
# the real entries; power-law frontiers (one hub among many leaves) go sparse.
DENSE_MAX_PADDING = 4
DENSE_MIN_CELLS = 1024


def gather(values: Tensor, positions: Tensor) -> Tensor:
    """``values[positions]`` for 1-D ``values``: one ``index_select`` over the
    flat positions, several times faster on the CPU than advanced indexing
    by a 2-D tensor."""
    return values.index_select(0, positions.reshape(-1)).view(positions.shape)


def dense_fits(deg: Tensor, width: int) -> bool:
    """Whether a padded ``[len(deg), width]`` matrix is the cheaper way."""
    return deg.numel() * width <= DENSE_MAX_PADDING * int(deg.sum()) + DENSE_MIN_CELLS


def padded(start: Tensor, deg: Tensor, width: int, size: int) -> tuple[Tensor, Tensor]:
    """Every seed's segment as a row of a ``[seeds, width]`` matrix.

    Args:
        start: int64 CSC position where every seed's segment starts.
        deg: int64 length of every seed's segment (at most ``width``).
        width: Columns of the matrix (``max(deg)``).
        size: Length of the CSC arrays, so padding cells stay in range.

    Returns:
        ``(positions, real)``: the CSC position of every cell (padding
        clamped to a valid one) and whether the cell is a real entry.
    """
    columns = torch.arange(width, device=deg.device)
    positions = (start.unsqueeze(1) + columns).clamp_(max=max(size - 1, 0))
    return positions, columns < deg.unsqueeze(1)
