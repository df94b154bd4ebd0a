"""Alias tables (weighted draws with replacement, O(1) a draw) against the weights.

The table is checked exactly (the probability it implies for every entry,
its own bucket's share plus what other buckets alias to it, against
``w / sum(w)``, to float32's precision of every bucket's split) and by
draws (chi-square at p = 0.001 for the degrees of freedom, fixed seeds;
the statistic also rejects uniform draws, so the check can fail).
"""

from __future__ import annotations

import pytest
import torch

from pyg_dist.kernels import AliasTable, build_alias_table, sample_alias, sample_weighted_segments

CRITICAL_001 = {3: 16.27, 4: 18.47, 5: 20.52}


def _implied(deg: torch.Tensor, table: AliasTable) -> torch.Tensor:
    """Probability of every entry under the table: (own share + aliased
    shares) / the column's number of buckets."""
    column = torch.repeat_interleave(torch.arange(deg.numel()), deg)
    prob = table.prob.double()
    usable = prob >= 0
    mass = torch.where(usable, prob, 0.0)
    alias = torch.arange(prob.numel()) + table.step
    mass.index_add_(0, alias[usable], (1 - prob)[usable])
    return mass / deg[column].double()


def _columns(seed: int, num_columns: int, max_degree: int, kind: str):
    gen = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, max_degree + 1, (num_columns,), generator=gen)
    total = int(deg.sum())
    if kind == "uniform":
        weight = torch.rand(total, generator=gen)
    elif kind == "decades":  # 24 decades apart, float64
        weight = torch.rand(total, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(
            -12, 12, (total,), generator=gen).double()
    elif kind == "ties":  # many weights equal to the column's mean
        weight = torch.randint(0, 3, (total,), generator=gen).float()
    else:
        weight = torch.ones(total)
    weight[torch.rand(total, generator=gen) < 0.3] = 0
    return deg, weight


@pytest.mark.parametrize("kind", ["uniform", "decades", "ties", "equal"])
@pytest.mark.parametrize("seed", range(5))
def test_the_table_implies_exactly_the_weights(kind, seed):
    deg, weight = _columns(seed, 60, 30, kind)
    table = build_alias_table(deg, weight)
    column = torch.repeat_interleave(torch.arange(deg.numel()), deg)
    total = torch.zeros(deg.numel(), dtype=torch.float64).index_add_(0, column, weight.double())
    usable = total[column] > 0
    implied = _implied(deg, table)
    expected = weight.double() / total[column].clamp(min=1e-300)
    # Every bucket's split is kept in float32: 6e-8 of itself.
    assert torch.allclose(implied[usable], expected[usable], rtol=1e-6, atol=1e-9)
    assert torch.all((table.prob[usable] >= 0) & (table.prob[usable] <= 1))
    # Weight 0: probability exactly 0, and no bucket aliases to it.
    assert torch.all(implied[weight == 0] == 0)
    aliases = (torch.arange(weight.numel()) + table.step)[usable]
    assert torch.all(column[aliases] == column[usable]) and torch.all(weight[aliases] > 0)
    # A column of zero weights is marked as such (no draws).
    assert torch.all(table.prob[~usable] == -1)


def test_draws_follow_the_weights_and_never_take_weight_zero():
    weight = torch.tensor([1.0, 0.0, 2.0, 3.0, 0.5, 3.5])
    deg = torch.tensor([6])
    table = build_alias_table(deg, weight)
    draws = 4000
    counts, positions = sample_alias(torch.zeros(draws, dtype=torch.long),
                                     torch.full((draws,), 6), table, 5,
                                     torch.Generator().manual_seed(0))
    assert torch.all(counts == 5)
    observed = torch.bincount(positions, minlength=6)
    assert observed[1] == 0
    keep = weight > 0
    total = int(counts.sum())
    by_weight = weight[keep] / weight.sum() * total
    chi = float(((observed[keep] - by_weight) ** 2 / by_weight).sum())
    assert chi < CRITICAL_001[4]
    uniform = torch.full((5,), total / 5)
    assert float(((observed[keep] - uniform) ** 2 / uniform).sum()) > 10 * CRITICAL_001[4]


def test_columns_without_positive_weight_or_entries_get_no_draws():
    # Columns: [1, 0, 2], [0, 0], [], [5], [] (the last empty one at the end).
    weight = torch.tensor([1.0, 0.0, 2.0, 0.0, 0.0, 5.0])
    deg = torch.tensor([3, 2, 0, 1, 0])
    colptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(deg, 0)])
    table = build_alias_table(deg, weight)
    seeds = torch.tensor([0, 1, 2, 3, 4, 1, 0])
    start, seed_deg = colptr[seeds], deg[seeds]
    counts, positions = sample_alias(start, seed_deg, table, 4, torch.Generator().manual_seed(1))
    assert counts.tolist() == [4, 0, 0, 4, 0, 0, 4]
    first, second, third = positions.view(3, 4)
    assert set(first.tolist()) <= {0, 2} and set(second.tolist()) == {5}
    assert set(third.tolist()) <= {0, 2}
    empty_counts, empty = sample_alias(start, seed_deg, table, 0)
    assert empty_counts.tolist() == [0] * 7 and empty.numel() == 0


def test_the_same_generator_seed_gives_the_same_draws():
    deg, weight = _columns(3, 100, 12, "uniform")
    colptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(deg, 0)])
    table = build_alias_table(deg, weight)
    seeds = torch.randint(0, 100, (300,), generator=torch.Generator().manual_seed(2))
    start, seed_deg = colptr[seeds], deg[seeds]
    first = sample_alias(start, seed_deg, table, 4, torch.Generator().manual_seed(9))
    again = sample_alias(start, seed_deg, table, 4, torch.Generator().manual_seed(9))
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_the_weighted_kernel_draws_through_the_table_the_same_law():
    # Many columns of varied degree: every draw stays in its column, skips
    # weight 0, and the per-entry frequencies over all draws match the
    # weights (chi-square over the entries of one column drawn often).
    deg, weight = _columns(4, 200, 10, "uniform")
    colptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(deg, 0)])
    table = build_alias_table(deg, weight)
    seeds = torch.arange(200)
    start, seed_deg = colptr[seeds], deg[seeds]
    counts, positions = sample_weighted_segments(start, seed_deg, weight, 3, True,
                                                 torch.Generator().manual_seed(5), alias=table)
    at = 0
    for i, c in enumerate(counts.tolist()):
        lo, hi = int(colptr[i]), int(colptr[i + 1])
        positive = [p for p in range(lo, hi) if weight[p] > 0]
        assert c == (3 if positive else 0)
        assert all(p in positive for p in positions[at:at + c].tolist())
        at += c
    assert at == positions.numel()


def test_tiny_and_huge_weights_stay_in_their_column():
    weight = torch.tensor([1e-300, 1e300, 0.0, 1e-6, 1e6, 1e6], dtype=torch.float64)
    deg = torch.tensor([3, 3])
    table = build_alias_table(deg, weight)
    implied = _implied(deg, table)
    assert float(implied[1]) == pytest.approx(1.0) and float(implied[2]) == 0
    start, seed_deg = torch.tensor([0, 3]).repeat(500), deg.repeat(500)
    counts, positions = sample_alias(start, seed_deg, table, 4, torch.Generator().manual_seed(3))
    rows = positions.view(-1, 4)
    assert torch.all(rows[0::2] < 3) and torch.all(rows[0::2] != 2)
    assert torch.all(rows[1::2] >= 3)
