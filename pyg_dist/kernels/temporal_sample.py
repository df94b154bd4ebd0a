"""Exact, vectorised one-hop temporal sampling: no neighbour from a seed's future.

Semantics (PyG's ``time_attr`` with disjoint sampling): every seed carries a
time (the input time of the root it was sampled for), and only entries whose
time is at most that seed's time may be drawn. The entry's time is the time
of the neighbour node (``time_attr`` on nodes) or of the edge (on edges);
the caller gathers it per CSC entry. Among the eligible entries:

* ``"uniform"``: a uniform ``min(k, eligible)``-subset (or ``k`` draws with
  replacement), or by weight when weights are given (:mod:`.weighted_sample`;
  uniform is the same race with every eligible entry at rate 1);
* ``"last"``: the ``k`` most recent; among entries of equal time the later
  CSC position counts as more recent, which is what taking the tail of a
  neighbourhood sorted by time (PyG's way) gives.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from pyg_dist.kernels.candidates import (
    Candidates,
    dense_fits,
    eligible,
    expand,
    gather,
    narrow_dense,
    padded,
)
from pyg_dist.kernels.neighbor_sample import check_fanout, sample_segments
from pyg_dist.kernels.weighted_sample import (
    draw_by_rate,
    race_dtype,
    sample_candidates,
)

TEMPORAL_STRATEGIES = ("uniform", "last")


def check_temporal(strategy: str, num_neighbors: int, replace: bool, weighted: bool,
                   seed_time: Tensor, time_dtype: torch.dtype, num_seeds: int) -> None:
    """The argument checks of both temporal kernels: ``ValueError`` as
    :func:`sample_temporal_segments` says."""
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


def sample_temporal_segments(start: Tensor, deg: Tensor, entry_time: Tensor,
                             seed_time: Tensor, num_neighbors: int, strategy: str = "uniform",
                             replace: bool = False, weight: Optional[Tensor] = None,
                             generator: Optional[torch.Generator] = None,
                             dense: Optional[bool] = None) -> tuple[Tensor, Tensor]:
    """Samples up to ``num_neighbors`` of every seed's entries from its past.

    Args:
        start: int64 CSC position where every seed's segment starts.
        deg: int64 length of every seed's segment.
        entry_time: Time of every CSC entry (indexed by CSC position).
        seed_time: Time of every seed, of ``entry_time``'s dtype.
        num_neighbors: Fan-out ``k``; ``-1`` takes every eligible entry.
        strategy: ``"uniform"`` or ``"last"`` (the ``k`` most recent).
        replace: Draw with replacement (``"uniform"`` only).
        weight: Weight of every CSC entry, to draw by weight (``"uniform"``
            only); entries of weight 0 are never drawn.
        generator: Random generator on the tensors' device.
        dense: Force the padded-matrix (``True``) or the sparse (``False``)
            way; ``None`` picks the cheaper one. Both draw the same law.

    Returns:
        ``(counts, positions)``: CSC positions, seed after seed.

    Raises:
        ValueError: for an unknown strategy, ``"last"`` with replacement or
            weights, ``num_neighbors < -1``, times of different dtypes, or
            not one seed time per seed.
    """
    check_temporal(strategy, num_neighbors, replace, weight is not None, seed_time,
                   entry_time.dtype, deg.numel())
    if deg.numel() == 0 or int(deg.max()) == 0:
        return torch.zeros_like(deg), deg.new_empty(0)
    width = int(deg.max())
    use_dense = dense if dense is not None else dense_fits(deg, width)
    if use_dense and (num_neighbors != -1 or weight is None and strategy == "uniform"):
        positions, real = padded(start, deg, width, entry_time.numel())
        times = gather(entry_time, positions)
        eligible_cells = real & (times <= seed_time.unsqueeze(1))
        if strategy == "last":
            if num_neighbors == -1:
                return _all(narrow_dense(positions, eligible_cells))
            return _most_recent_dense(positions, eligible_cells, times, num_neighbors)
        if weight is None:
            return _uniform(narrow_dense(positions, eligible_cells), num_neighbors, replace,
                            generator)
        rates = torch.where(eligible_cells,
                            gather(weight, positions).to(race_dtype(weight, replace)), 0.0)
        return draw_by_rate(positions, rates, num_neighbors, replace, generator)
    candidates = _past(start, deg, entry_time, seed_time, weight)
    if strategy == "uniform" and weight is None:
        return _uniform(candidates, num_neighbors, replace, generator)
    if strategy == "last":
        positions, start, deg = candidates
        if num_neighbors == -1 or positions.numel() == 0:
            return deg, positions
        return torch.clamp(deg, max=num_neighbors), positions[
            _most_recent(start, deg, entry_time[positions], num_neighbors)]
    rates = (torch.ones(candidates.positions.numel(), dtype=torch.float64,
                        device=deg.device) if weight is None
             else weight[candidates.positions].double())
    return sample_candidates(candidates, rates, num_neighbors, replace, generator)


def _all(candidates: Candidates) -> tuple[Tensor, Tensor]:
    return candidates.deg, candidates.positions


def _uniform(candidates: Candidates, k: int, replace: bool,
             generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    """Uniform draws among the eligible entries: the uniform kernel itself
    over the narrowed segments (Floyd's algorithm, no sort, no top-k)."""
    positions, start, deg = candidates
    if positions.numel() == 0:
        return deg, positions
    counts, local = sample_segments(start, deg, k, replace, generator)
    return counts, positions.index_select(0, local)


def _past(start: Tensor, deg: Tensor, entry_time: Tensor, seed_time: Tensor,
          weight: Optional[Tensor]) -> Candidates:
    positions, segment, _ = expand(start, deg)
    keep = entry_time.index_select(0, positions) <= seed_time.index_select(0, segment)
    if weight is not None:
        keep &= weight.index_select(0, positions) > 0
    return eligible(positions, segment, keep, deg.numel())


def _most_recent_dense(positions: Tensor, eligible_cells: Tensor, times: Tensor,
                       k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` latest eligible cells of every row of a padded matrix
    (``times``: every cell's time)."""
    width = positions.shape[1]
    low, high = (int(v) for v in torch.aminmax(times))
    if (high - low + 1) * width < (1 << 62):
        # One top-k over (time, column) packed into one int64: the later
        # column wins a tie, as in the sorts below; ineligible cells -1.
        k = min(k, width)
        columns = torch.arange(width, device=positions.device)
        keys = (times - low).mul_(width).add_(columns)
        keys.masked_fill_(~eligible_cells, -1)
        picked = keys.topk(k, dim=1).indices
        counts = torch.clamp(eligible_cells.sum(1), max=k)
        first = torch.arange(k, device=positions.device) < counts.unsqueeze(1)
        return counts, positions.gather(1, picked)[first]
    # Two stable sorts per row: by time, then ineligible cells first. Equal
    # times keep CSC order, so a row's tail holds its latest eligible
    # entries, the later CSC position of two equal times last.
    by_time = torch.sort(times, dim=1, stable=True).indices
    flags = eligible_cells.gather(1, by_time).to(torch.int8)
    order = by_time.gather(1, torch.sort(flags, dim=1, stable=True).indices)
    counts = torch.clamp(eligible_cells.sum(1), max=k)
    tail = torch.arange(width, device=positions.device) >= width - counts.unsqueeze(1)
    return counts, positions.gather(1, order)[tail]


def _most_recent(start: Tensor, deg: Tensor, time: Tensor, k: int) -> Tensor:
    """Indices into the candidates of every segment's ``k`` latest entries."""
    _, segment, offset = expand(start, deg)
    # Candidates run in CSC order within a segment: reversed, a stable sort
    # by descending time puts the later of two equal times first.
    reverse = torch.arange(time.numel() - 1, -1, -1, device=time.device)
    by_time = reverse[torch.argsort(time[reverse], descending=True, stable=True)]
    order = by_time[torch.argsort(segment[by_time], stable=True)]
    return order[offset < k]
