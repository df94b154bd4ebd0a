"""The weighted and temporal sampling kernels against brute force.

Distributions are checked with a chi-square statistic at p = 0.001 for the
degrees of freedom (tight: the critical value itself, not a loose bound),
with fixed generator seeds so a run is deterministic; each check also shows
that the statistic rejects the distribution the kernel must *not* follow
(uniform instead of by weight), so the test can fail.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from pyg_dist.kernels import (
    sample_time_sorted,
    sample_weighted_segments,
    sort_by_time,
    weighted_sample,
)

# chi-square critical values at p = 0.001, by degrees of freedom.
CRITICAL_001 = {2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 9: 27.88, 14: 36.12, 19: 43.82}


def _chi_square(observed: torch.Tensor, expected: torch.Tensor) -> float:
    observed, expected = observed.double(), expected.double()
    return float(((observed - expected) ** 2 / expected).sum())


def _segments(counts: torch.Tensor, positions: torch.Tensor) -> list[list[int]]:
    out, at = [], 0
    for c in counts.tolist():
        out.append(positions[at:at + c].tolist())
        at += c
    assert at == positions.numel()
    return out


# Three ways to the same law: the padded matrix, the narrowed segments, and
# seeds in groups of similar degree (what big frontiers take without
# replacement), forced here on small ones.
WEIGHTED_WAYS = pytest.mark.parametrize("dense", [True, False, None],
                                        ids=["dense", "sparse", "grouped"])


def _weighted(start, deg, weight, k, replace, dense, seed=0):
    if dense is not None:
        return sample_weighted_segments(start, deg, weight, k, replace,
                                        torch.Generator().manual_seed(seed), dense=dense)
    saved = weighted_sample.GROUP_MIN_CELLS
    weighted_sample.GROUP_MIN_CELLS = 0
    try:
        return sample_weighted_segments(start, deg, weight, k, replace,
                                        torch.Generator().manual_seed(seed))
    finally:
        weighted_sample.GROUP_MIN_CELLS = saved


def _temporal(start, deg, entry_time, seed_time, k, strategy="uniform", replace=False,
              weight=None, seed=1, tiling=None):
    """The server's temporal kernel over the entries sorted by time within
    the segments of ``tiling`` (default: ``deg``'s, which tile them)."""
    perm, sorted_time = sort_by_time(deg if tiling is None else tiling, entry_time)
    return sample_time_sorted(start, deg, sorted_time, perm, seed_time, k, strategy, replace,
                              None if weight is None else weight[perm],
                              torch.Generator().manual_seed(seed))


def _random_graph(num_seeds: int, max_degree: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, max_degree + 1, (num_seeds,), generator=gen)
    start = torch.cumsum(deg, 0) - deg
    total = int(deg.sum())
    # A third of the weights are 0; the rest spread over two decades.
    weight = torch.rand(total, generator=gen) * 10
    weight[torch.rand(total, generator=gen) < 0.33] = 0
    return start, deg, weight, gen


# Weighted ###################################################################

@WEIGHTED_WAYS
@pytest.mark.parametrize("k", [-1, 0, 1, 3, 8])
@pytest.mark.parametrize("replace", [False, True])
def test_weighted_samples_stay_in_segment_and_skip_zero_weights(k, replace, dense):
    start, deg, weight, _ = _random_graph(300, 10, seed=k + 2)
    counts, positions = _weighted(start, deg, weight, k, replace, dense)
    for i, picked in enumerate(_segments(counts, positions)):
        lo, hi = int(start[i]), int(start[i] + deg[i])
        positive = [p for p in range(lo, hi) if weight[p] > 0]
        assert all(p in positive for p in picked)
        if k == -1:
            assert picked == positive  # every positive entry, in CSC order
        elif replace:
            assert len(picked) == (k if positive else 0)
        else:
            assert len(picked) == min(k, len(positive))
            assert len(set(picked)) == len(picked)


@WEIGHTED_WAYS
def test_weighted_draws_with_replacement_follow_the_weights(dense):
    weight = torch.tensor([1.0, 0.0, 2.0, 3.0, 0.5, 3.5])
    start, deg = torch.zeros(4000, dtype=torch.long), torch.full((4000,), 6)
    counts, positions = _weighted(start, deg, weight, 5, True, dense)
    assert torch.all(counts == 5)
    observed = torch.bincount(positions, minlength=6)
    assert observed[1] == 0  # weight 0: never drawn
    keep = weight > 0
    draws = int(counts.sum())
    by_weight = weight[keep] / weight.sum() * draws
    assert _chi_square(observed[keep], by_weight) < CRITICAL_001[4]
    uniform = torch.full((5,), draws / 5)
    assert _chi_square(observed[keep], uniform) > 10 * CRITICAL_001[4]


def _successive_pair_probability(weight: list[float], a: int, b: int) -> float:
    """P({a, b}) when two entries are drawn one after another by weight."""
    total = sum(weight)
    return (weight[a] / total * weight[b] / (total - weight[a])
            + weight[b] / total * weight[a] / (total - weight[b]))


@WEIGHTED_WAYS
def test_weighted_subsets_without_replacement_follow_successive_sampling(dense):
    # 6 entries, one of weight 0, k = 2: the 10 pairs of the 5 positive ones
    # with the probabilities of drawing one after another by weight.
    weights = [1.0, 4.0, 0.0, 2.0, 0.5, 2.5]
    weight = torch.tensor(weights)
    draws = 30_000
    start, deg = torch.zeros(draws, dtype=torch.long), torch.full((draws,), 6)
    counts, positions = _weighted(start, deg, weight, 2, False, dense)
    assert torch.all(counts == 2)
    pairs = positions.view(-1, 2).sort(dim=1).values
    assert torch.all(pairs[:, 0] < pairs[:, 1]) and not torch.any(pairs == 2)
    positive = [i for i, w in enumerate(weights) if w > 0]
    combos = list(itertools.combinations(positive, 2))
    codes = pairs[:, 0] * 6 + pairs[:, 1]
    observed = torch.bincount(codes, minlength=36)[[a * 6 + b for a, b in combos]]
    assert int(observed.sum()) == draws
    expected = torch.tensor([_successive_pair_probability(weights, a, b) for a, b in combos])
    assert math.isclose(float(expected.sum()), 1.0, rel_tol=1e-9)
    assert _chi_square(observed, expected * draws) < CRITICAL_001[9]
    assert _chi_square(observed, torch.full((10,), draws / 10)) > 10 * CRITICAL_001[9]


@WEIGHTED_WAYS
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_draw_without_replacement_is_proportional_to_weight(dense, dtype):
    # float32 weights race in float32, float64 ones in float64.
    weight = torch.tensor([0.0, 1.0, 1.0, 6.0, 2.0], dtype=dtype)
    draws = 20_000
    start, deg = torch.zeros(draws, dtype=torch.long), torch.full((draws,), 5)
    _, positions = _weighted(start, deg, weight, 1, False, dense, seed=3)
    observed = torch.bincount(positions, minlength=5)
    assert observed[0] == 0
    assert _chi_square(observed[1:], weight[1:] / weight.sum() * draws) < CRITICAL_001[3]


@WEIGHTED_WAYS
def test_the_same_generator_seed_gives_the_same_weighted_sample(dense):
    start, deg, weight, _ = _random_graph(100, 12, seed=5)
    for replace in (False, True):
        first = _weighted(start, deg, weight, 4, replace, dense, seed=9)
        again = _weighted(start, deg, weight, 4, replace, dense, seed=9)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


@WEIGHTED_WAYS
def test_weighted_with_replacement_survives_tiny_and_huge_weights(dense):
    # Weights 12 decades apart: the tiny ones are still reachable in
    # principle and never pushed out of their segment by rounding.
    weight = torch.tensor([1e-6, 1e6, 0.0, 1e-6, 1e6, 1e6])
    start, deg = torch.tensor([0, 3]), torch.tensor([3, 3])
    counts, positions = _weighted(start.repeat(500), deg.repeat(500), weight, 4, True, dense)
    for i, picked in enumerate(_segments(counts, positions)):
        lo = 0 if i % 2 == 0 else 3
        assert all(lo <= p < lo + 3 and p != 2 for p in picked)


@pytest.mark.parametrize("k", [1, 4, 12])
def test_grouped_way_over_a_hub_among_leaves(k):
    # Degrees from 0 to 260 (several groups, seeds with at most k entries
    # taking all), a narrower segment of the widest group last in the array
    # (its row reaches past the weights): every seed gets min(k, positive)
    # distinct positive entries of its own segment, in the grouped and in
    # the dense way alike.
    deg = torch.tensor([0, 1, 2, 5, 9, 40, 13, 260, 250]).repeat(20)
    start = torch.cumsum(deg, 0) - deg
    gen = torch.Generator().manual_seed(k)
    weight = torch.rand(int(deg.sum()), generator=gen)
    weight[torch.rand(weight.numel(), generator=gen) < 0.2] = 0
    for dense in (None, True):
        counts, positions = _weighted(start, deg, weight, k, False, dense, seed=k)
        for i, picked in enumerate(_segments(counts, positions)):
            lo, hi = int(start[i]), int(start[i] + deg[i])
            positive = {p for p in range(lo, hi) if weight[p] > 0}
            assert len(set(picked)) == len(picked) == min(k, len(positive))
            assert set(picked) <= positive


# Temporal: segments sorted by time once (the server's way) #################

def _temporal_case(seed: int):
    """Every seed's segment, the whole CSC tiled by them."""
    start, deg, _, gen = _random_graph(200, 12, seed)
    total = int(deg.sum())
    entry_time = torch.randint(0, 50, (total,), generator=gen)
    seed_time = torch.randint(0, 50, (deg.numel(),), generator=gen)
    return start, deg, entry_time, seed_time


def _past(start, deg, entry_time, seed_time, i):
    lo, hi = int(start[i]), int(start[i] + deg[i])
    return [p for p in range(lo, hi) if entry_time[p] <= seed_time[i]]


@pytest.mark.parametrize("k", [-1, 1, 3, 6])
def test_last_takes_exactly_the_most_recent_neighbours(k):
    start, deg, entry_time, seed_time = _temporal_case(seed=k + 30)
    perm, sorted_time = sort_by_time(deg, entry_time)
    assert bool((sorted_time == entry_time[perm]).all())
    counts, positions = _temporal(start, deg, entry_time, seed_time, k, "last")
    for i, picked in enumerate(_segments(counts, positions)):
        past = _past(start, deg, entry_time, seed_time, i)
        # Most recent first; equal times: the later CSC position first.
        newest = sorted(past, key=lambda p: (int(entry_time[p]), p), reverse=True)
        assert sorted(picked) == sorted(newest if k == -1 else newest[:k])


@pytest.mark.parametrize("k", [-1, 0, 2, 5])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_uniform_and_weighted_temporal_sampling_never_reach_the_future(k, replace, weighted):
    start, deg, entry_time, seed_time = _temporal_case(seed=k + 50)
    weight = torch.rand(entry_time.numel(), generator=torch.Generator().manual_seed(k + 3))
    weight[::4] = 0
    counts, positions = _temporal(start, deg, entry_time, seed_time, k, "uniform", replace,
                                  weight if weighted else None)
    for i, picked in enumerate(_segments(counts, positions)):
        past = [p for p in _past(start, deg, entry_time, seed_time, i)
                if not weighted or weight[p] > 0]
        assert all(p in past for p in picked)
        if k == -1:
            assert sorted(picked) == past
        elif replace:
            assert len(picked) == (k if past else 0)
        else:
            assert len(picked) == min(k, len(past)) == len(set(picked))


def test_uniform_temporal_subsets_are_uniform_over_the_past():
    # 7 entries, times 0..6; the seed at time 5 may draw from 6 of them.
    draws = 20_000
    start, deg = torch.zeros(draws, dtype=torch.long), torch.full((draws,), 7)
    entry_time = torch.tensor([3, 0, 6, 5, 1, 4, 2])
    seed_time = torch.full((draws,), 5)
    counts, positions = _temporal(start, deg, entry_time, seed_time, 2, seed=4,
                                  tiling=torch.tensor([7]))
    assert torch.all(counts == 2) and not torch.any(positions == 2)
    pairs = positions.view(-1, 2).sort(dim=1).values
    past = [0, 1, 3, 4, 5, 6]
    combos = list(itertools.combinations(past, 2))
    observed = torch.bincount(pairs[:, 0] * 7 + pairs[:, 1], minlength=49)[
        [a * 7 + b for a, b in combos]]
    assert int(observed.sum()) == draws
    assert _chi_square(observed, torch.full((15,), draws / 15)) < CRITICAL_001[14]
    # The same statistic rejects a law that favours the older entries.
    older = torch.tensor([1.0 + (a + b < 6) for a, b in combos])
    assert _chi_square(observed, older / older.sum() * draws) > 10 * CRITICAL_001[14]


def test_temporal_sampling_by_weight_skips_the_future_and_zero_weights():
    weight = torch.tensor([1.0, 0.0, 3.0, 2.0, 4.0])
    entry_time = torch.tensor([1, 1, 9, 2, 3])  # entry 2 lies in the future
    draws = 6000
    start, deg = torch.zeros(draws, dtype=torch.long), torch.full((draws,), 5)
    _, positions = _temporal(start, deg, entry_time, torch.full((draws,), 5), 1,
                             weight=weight, seed=2, tiling=torch.tensor([5]))
    observed = torch.bincount(positions, minlength=5)
    assert observed[1] == 0 and observed[2] == 0
    keep = torch.tensor([0, 3, 4])
    assert _chi_square(observed[keep], weight[keep] / weight[keep].sum() * draws) \
        < CRITICAL_001[2]


def test_temporal_bad_input_is_refused():
    start, deg = torch.tensor([0]), torch.tensor([3])
    times = torch.tensor([1, 2, 3])
    seed_time = torch.tensor([2])
    with pytest.raises(ValueError, match="same dtype"):
        _temporal(start, deg, times, torch.tensor([2.0]), 1)
    with pytest.raises(ValueError, match="2 seed times for 1 seeds"):
        _temporal(start, deg, times, torch.tensor([2, 2]), 1)
    with pytest.raises(ValueError, match="one of"):
        _temporal(start, deg, times, seed_time, 1, "oldest")
    with pytest.raises(ValueError, match="with replacement"):
        _temporal(start, deg, times, seed_time, 1, "last", replace=True)
    with pytest.raises(ValueError, match="by weight"):
        _temporal(start, deg, times, seed_time, 1, "last", weight=times.double())
    with pytest.raises(ValueError, match=">= 0"):
        _temporal(start, deg, times, seed_time, -2)
    with pytest.raises(ValueError, match=">= 0"):
        sample_weighted_segments(start, deg, times.double(), -2)
