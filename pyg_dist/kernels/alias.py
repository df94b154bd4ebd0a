"""Weighted draws with replacement in O(1) a draw: alias tables per CSC column.

A server's edge weights do not change, so it can spend one pass over them
(:func:`build_alias_table`, once per weight attribute) on Walker's alias
method: every column of ``d`` entries becomes ``d`` buckets of equal
mass, bucket ``i`` holding entry ``i`` with probability ``prob[i]`` and
entry ``alias[i]`` (an entry of the same column) otherwise. A draw is then
a uniform bucket and one comparison (:func:`sample_alias`), where the
running-sum way reads every weight of the segment on every call.

The table is built for all columns at once, without a loop over columns,
by the sweep of Huebschle-Schneider and Sanders (2019) phrased as prefix
sums: scaled to a mean of 1, the *light* entries (below 1) of a column
need ``1 - w`` each and the *heavy* ones (1 or more) give ``w - 1`` each.
Lay a column's needs and its gifts out on two lines in CSC order (running
sums restarted at every column); light ``i``'s alias is the heavy whose
gift covers the point where ``i``'s need starts, and heavy ``j`` keeps
``1 - (D - E_j)`` of its own bucket (``E_j`` where its gift ends, ``D``
where the need covering that point ends) and hands the rest to the next
heavy of its column: what the sequential sweep does step by step. Both
lookups are binary searches within the column's own stretch (all columns
at once) over the very same floats, so the table is the sweep's exactly,
for the rounded sums; the column's largest entry is always heavy and its
last heavy keeps its whole bucket, so rounding never leaves a light entry
without an alias nor a bucket short of mass.

Exactness: an entry of weight 0 is light with ``prob`` exactly 0 and no
entry's alias is ever one of weight 0 (aliases are heavy), so it is never
drawn; a column without positive weight gets ``prob = -1`` and no draws.
Other probabilities are those of the weights up to the float32 rounding of
every bucket's split (relative 6e-8) and the float64 rounding of the
running sums (one sum over the part less the column's start: about
``1e-16`` times the part's entries, a few ``1e-10`` for millions, far
below what any test of the law sees). Building costs about a quarter of a
microsecond an entry on one core (0.55 s for the bench's 2M entries, as
sorting them by time once does) and 8 bytes an entry are kept.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor


class AliasTable(NamedTuple):
    """Walker alias table of every CSC column, 8 bytes a CSC entry.

    Attributes:
        words: int64, one per CSC entry, holding two 32-bit halves side by
            side, so that a draw reads one word: :attr:`prob` and
            :attr:`step`.
    """

    words: Tensor

    @property
    def prob(self) -> Tensor:
        """float32, per CSC entry: the chance that a draw landing in the
        entry's bucket keeps the entry; ``-1`` in every entry of a column
        whose weights are all 0 (no draws there)."""
        return self.words.view(torch.int32).view(-1, 2)[:, 0].view(torch.float32)

    @property
    def step(self) -> Tensor:
        """int32, per CSC entry: how far the entry drawn otherwise (its
        alias, in the same column) lies from it, ``alias - position`` (a
        draw adds it or not: no select between two gathers)."""
        return self.words.view(torch.int32).view(-1, 2)[:, 1]


def _pack(prob: Tensor, step: Tensor) -> AliasTable:
    # float32 keeps a bucket's split to 6e-8 of itself (the precision of the
    # float32 races) and a tiny weight's own share distinct down to 1e-38;
    # below that a positive share is raised to float32's smallest normal
    # number rather than flushed to 0, so a positive weight stays drawable.
    small = torch.finfo(torch.float32).smallest_normal
    prob32 = torch.where((prob > 0) & (prob < small), small, prob).float()
    pair = torch.empty((prob.numel(), 2), dtype=torch.int32, device=prob.device)
    pair[:, 0] = prob32.view(torch.int32)
    pair[:, 1] = step
    return AliasTable(pair.view(torch.int64).view(-1))


def _segment_max(values: Tensor, column: Tensor, num_columns: int) -> Tensor:
    out = values.new_zeros(num_columns)
    return out.scatter_reduce_(0, column, values, reduce="amax", include_self=True)


def _search(values: Tensor, low: Tensor, high: Tensor, query: Tensor, right: bool) -> Tensor:
    """First index in ``[low, high)`` whose value is above ``query``
    (``right``) or at least ``query``; ``high`` if none. ``values`` is
    non-decreasing within every range; one binary search per query, all at
    once."""
    if query.numel() == 0:
        return low
    low, high = low.clone(), high.clone()
    last = max(values.numel() - 1, 0)
    for _ in range(int((high - low).max()).bit_length() + 1):
        mid = torch.div(low + high, 2, rounding_mode="floor")
        value = values.index_select(0, mid.clamp(max=last))
        active = low < high
        go_right = active & ((value <= query) if right else (value < query))
        low = torch.where(go_right, mid + 1, low)
        high = torch.where(active & ~go_right, mid, high)
    return low


def _local_prefix(values: Tensor, column: Tensor, num_columns: int
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Running sums of ``values`` restarted at every column (entries listed
    column after column), where every column's stretch starts and ends,
    and every entry's running sum before it (0 for a column's first)."""
    count = torch.bincount(column, minlength=num_columns)
    end = torch.cumsum(count, 0)
    begin = end - count
    running = torch.cumsum(values, 0)
    base = torch.where(begin > 0, running[(begin - 1).clamp(min=0)], 0.0)
    running = running - base[column]
    first = torch.arange(values.numel(), device=values.device) == begin[column]
    before = torch.where(first, 0.0, running.roll(1))
    return running, begin, end, before


def _scaled(deg: Tensor, weight: Tensor, column: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Every weight scaled to its column's mean of 1, whether its column has
    a positive weight, and whether the entry is heavy."""
    num_columns = deg.numel()
    w = weight.double()
    # Scaled by the column's largest weight first, so no sum overflows.
    top = _segment_max(w, column, num_columns)
    usable = top > 0
    w = w / torch.where(usable, top, 1.0)[column]
    total = torch.zeros(num_columns, dtype=torch.float64, device=w.device).index_add_(
        0, column, w)
    scaled = w * (deg / torch.where(usable, total, 1.0))[column]
    ok = usable[column]
    # The column's largest entry is heavy even if rounding put it at 1 - eps:
    # every usable column has a heavy entry to alias its light ones to.
    return scaled, ok, ok & ((scaled >= 1) | (w == 1))


def build_alias_table(deg: Tensor, weight: Tensor) -> AliasTable:
    """Alias tables of every column of a CSC, all at once (see the module).

    Args:
        deg: int64 length of every column (all of them, in CSC order; the
            columns tile the entries).
        weight: Finite, non-negative weight of every CSC entry.

    Returns:
        The :class:`AliasTable` of the whole CSC.

    Raises:
        ValueError: if a column has 2^31 entries or more.
    """
    num_entries, num_columns = weight.numel(), deg.numel()
    device = weight.device
    if num_columns and int(deg.max()) >= 1 << 31:
        raise ValueError("alias tables hold 32-bit steps: a column must have fewer than "
                         "2^31 entries")
    column = torch.repeat_interleave(torch.arange(num_columns, device=device), deg,
                                     output_size=num_entries)
    scaled, ok, heavy_mask = _scaled(deg, weight, column)
    light = (ok & ~heavy_mask).nonzero().view(-1)
    heavy = heavy_mask.nonzero().view(-1)
    light_col = column[light]
    need, light_begin, light_end, need_before = _local_prefix(
        1 - scaled[light], light_col, num_columns)
    gift, heavy_begin, heavy_end, _ = _local_prefix(
        (scaled[heavy] - 1).clamp_(min=0), column[heavy], num_columns)

    prob = torch.zeros(num_entries, dtype=torch.float64, device=device)
    alias = torch.full((num_entries,), -1, dtype=torch.long, device=device)
    # A light entry keeps its own weight and takes the rest from the heavy
    # whose gift covers the point where its need starts.
    donor = _search(gift, heavy_begin[light_col], heavy_end[light_col], need_before, True)
    prob[light] = scaled[light]
    alias[light] = heavy[torch.minimum(donor, heavy_end[light_col] - 1)]
    prob[heavy], alias[heavy] = _heavy_buckets(heavy, column[heavy], gift, heavy_end, need,
                                               need_before, light_begin, light_end)
    prob.masked_fill_(~ok, -1.0)
    position = torch.arange(num_entries, device=device)
    return _pack(prob, torch.where(ok, alias - position, 0))


def _heavy_buckets(heavy: Tensor, heavy_col: Tensor, gift: Tensor, heavy_end: Tensor,
                   need: Tensor, need_before: Tensor, light_begin: Tensor,
                   light_end: Tensor) -> tuple[Tensor, Tensor]:
    """``(prob, alias)`` of the heavy entries' buckets: a heavy entry keeps
    its bucket but for the part of the need covering the end of its gift,
    which the next heavy of its column pays; the column's last heavy keeps
    its whole bucket."""
    rank = torch.arange(heavy.numel(), device=heavy.device)
    last = rank == heavy_end[heavy_col] - 1
    covering = _search(need, light_begin[heavy_col], light_end[heavy_col], gift, False)
    inside = covering < light_end[heavy_col]
    covering = covering.clamp(max=max(need.numel() - 1, 0))
    if need.numel():
        inside &= need_before[covering] < gift
        overshoot = torch.where(inside, need[covering] - gift, 0.0).clamp_(0.0, 1.0)
    else:
        overshoot = torch.zeros_like(gift)
    following = heavy[(rank + 1).clamp(max=max(heavy.numel() - 1, 0))]
    return torch.where(last, 1.0, 1 - overshoot), torch.where(last, heavy, following)


def sample_alias(start: Tensor, deg: Tensor, table: AliasTable, k: int,
                 generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
    """``k`` draws by weight, with replacement, for every seed.

    Args:
        start: int64 CSC position where every seed's column starts.
        deg: int64 length of every seed's column: the *whole* column the
            table was built over (not a part of it).
        table: :func:`build_alias_table` of the CSC.
        k: Draws per seed (at least 0).
        generator: Random generator on the tensors' device.

    Returns:
        ``(counts, positions)``: ``k`` CSC positions for every seed with a
        positive weight, none for the others; seed after seed.
    """
    n = deg.numel()
    if n == 0 or k == 0 or table.prob.numel() == 0:
        return torch.zeros_like(deg), deg.new_empty(0)
    size = table.words.numel()
    # A seed without entries draws u * 0 = bucket 0 at its start, kept in
    # range here; its draws, as those of a column of zero weights (prob
    # -1), are dropped below.
    start = start.clamp(max=size - 1)
    drawn = (deg > 0) & (table.prob.index_select(0, start) >= 0)
    # One uniform a draw: its integer part picks the bucket, its fraction
    # (uniform on [0, 1) and independent of the bucket) decides between the
    # bucket's entry and its alias. torch's float64 uniforms are multiples
    # of 2^-53 below 1, and rounding is monotone, so u * deg stays below
    # deg: no bucket past the column's last.
    point = torch.rand((n, k), dtype=torch.float64, device=deg.device,
                       generator=generator).mul_(deg.unsqueeze(1))
    bucket = point.long()
    point.sub_(bucket)
    flat = bucket.add_(start.unsqueeze(1)).view(-1)
    word = table.words.index_select(0, flat).view(torch.int32).view(-1, 2)
    moved = point.view(-1) >= word[:, 0].view(torch.float32)
    picked = torch.add(flat, word[:, 1].mul(moved))
    counts = torch.where(drawn, k, 0)
    if bool(drawn.all()):
        return counts, picked
    return counts, picked.view(n, k)[drawn].view(-1)
