"""Exact, vectorised one-hop temporal sampling: no neighbour from a seed's future.

Semantics (PyG's ``time_attr`` with disjoint sampling): every seed carries a
time (the input time of the root it was sampled for), and only entries whose
time is at most that seed's time may be drawn. The entry's time is the time
of the neighbour node (``time_attr`` on nodes) or of the edge (on edges);
the caller gathers it per CSC entry. Among the eligible entries:

* ``"uniform"``: a uniform ``min(k, eligible)``-subset (or ``k`` draws with
  replacement), by the uniform kernel, or by weight when weights are given;
* ``"last"``: the ``k`` most recent; among entries of equal time the later
  CSC position counts as more recent, which is what taking the tail of a
  neighbourhood sorted by time (PyG's way) gives.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from pyg_dist.kernels.candidates import Candidates, eligible, expand
from pyg_dist.kernels.neighbor_sample import sample_segments
from pyg_dist.kernels.weighted_sample import sample_weighted

TEMPORAL_STRATEGIES = ("uniform", "last")


def past_entries(start: Tensor, deg: Tensor, entry_time: Tensor, seed_time: Tensor,
                 weight: Optional[Tensor] = None) -> Candidates:
    """Every seed's entries no later than the seed (and of positive weight).

    Args:
        start: int64 CSC position where every seed's segment starts.
        deg: int64 length of every seed's segment.
        entry_time: Time of every CSC entry (indexed by CSC position).
        seed_time: Time of every seed, of ``entry_time``'s dtype.
        weight: Weight of every CSC entry, if sampling by weight: entries of
            weight 0 are left out too.

    Raises:
        ValueError: if the two times differ in dtype or ``seed_time`` does
            not have one entry per seed.
    """
    if seed_time.dtype != entry_time.dtype:
        raise ValueError(f"seed times ({seed_time.dtype}) and entry times "
                         f"({entry_time.dtype}) must have the same dtype")
    if seed_time.numel() != deg.numel():
        raise ValueError(f"got {seed_time.numel()} seed times for {deg.numel()} seeds")
    positions, segment, _ = expand(start, deg)
    keep = entry_time[positions] <= seed_time[segment]
    if weight is not None:
        keep &= weight[positions] > 0
    return eligible(positions, segment, keep, deg.numel())


def sample_temporal(candidates: Candidates, entry_time: Tensor, num_neighbors: int,
                    strategy: str = "uniform", replace: bool = False,
                    weight: Optional[Tensor] = None,
                    generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
    """Samples up to ``num_neighbors`` of every seed's eligible entries.

    Args:
        candidates: Every seed's eligible entries, from :func:`past_entries`.
        entry_time: Time of every CSC entry (indexed by CSC position).
        num_neighbors: Fan-out ``k``; ``-1`` takes every eligible entry.
        strategy: ``"uniform"`` or ``"last"`` (the ``k`` most recent).
        replace: Draw with replacement (``"uniform"`` only).
        weight: Weight of every CSC entry, to draw by weight
            (``"uniform"`` only).
        generator: Random generator on the tensors' device.

    Returns:
        ``(counts, positions)``: CSC positions, seed after seed.

    Raises:
        ValueError: for an unknown strategy, ``"last"`` with replacement or
            weights, or ``num_neighbors < -1``.
    """
    if strategy not in TEMPORAL_STRATEGIES:
        raise ValueError(f"temporal strategy must be one of {TEMPORAL_STRATEGIES}, "
                         f"got {strategy!r}")
    if num_neighbors < -1:
        raise ValueError(f"num_neighbors must be -1 (all) or >= 0, got {num_neighbors}")
    positions, start, deg = candidates
    if strategy == "last":
        if replace or weight is not None:
            raise ValueError("temporal strategy 'last' takes the most recent neighbours: "
                             "it cannot draw with replacement or by weight")
        if num_neighbors == -1 or positions.numel() == 0:
            return deg, positions
        return torch.clamp(deg, max=num_neighbors), positions[
            _most_recent(start, deg, entry_time[positions], num_neighbors)]
    if weight is not None:
        return sample_weighted(candidates, weight, num_neighbors, replace, generator)
    counts, local = sample_segments(start, deg, num_neighbors, replace, generator)
    return counts, positions[local]


def _most_recent(start: Tensor, deg: Tensor, time: Tensor, k: int) -> Tensor:
    """Indices into the candidates of every segment's ``k`` latest entries."""
    _, segment, offset = expand(start, deg)
    # Candidates run in CSC order within a segment: reversed, a stable sort
    # by descending time puts the later of two equal times first.
    reverse = torch.arange(time.numel() - 1, -1, -1, device=time.device)
    by_time = reverse[torch.argsort(time[reverse], descending=True, stable=True)]
    order = by_time[torch.argsort(segment[by_time], stable=True)]
    return order[offset < k]
