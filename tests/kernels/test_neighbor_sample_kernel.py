"""The CSC sampling kernel against brute force on random graphs."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.kernels import neighbor_sample as ns, sample_segments, segment_positions


def sample_neighbors(colptr, seeds, k, replace=False, generator=None):
    """The kernel over the CSC segments of ``seeds``, looked up as a server does."""
    start = colptr[seeds]
    return sample_segments(start, colptr[seeds + 1] - start, k, replace, generator)


def _random_csc(num_columns: int, max_degree: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, max_degree + 1, (num_columns,), generator=gen)
    return torch.cat([torch.zeros(1, dtype=torch.long), deg.cumsum(0)])


def _segments(counts, positions):
    out, at = [], 0
    for c in counts.tolist():
        out.append(positions[at:at + c].tolist())
        at += c
    assert at == positions.numel()
    return out


def test_segment_positions_concatenate_the_segments():
    counts = torch.tensor([3, 0, 1, 4])
    assert segment_positions(torch.zeros(4, dtype=torch.long), counts).tolist() == \
        [0, 1, 2, 0, 0, 1, 2, 3]
    idx = segment_positions(torch.tensor([10, 0, 5]), torch.tensor([2, 0, 3]))
    assert idx.tolist() == [10, 11, 5, 6, 7]
    assert segment_positions(torch.tensor([3]), torch.tensor([0])).numel() == 0
    assert segment_positions(torch.empty(0, dtype=torch.long),
                             torch.empty(0, dtype=torch.long)).numel() == 0


@pytest.mark.parametrize("k", [0, 1, 3, 7, 50])
@pytest.mark.parametrize("replace", [False, True])
def test_every_sample_lies_in_its_seed_segment_with_the_right_count(k, replace):
    colptr = _random_csc(200, 12, seed=k)
    seeds = torch.randint(0, 200, (300,), generator=torch.Generator().manual_seed(1))
    counts, positions = sample_neighbors(colptr, seeds, k, replace,
                                         torch.Generator().manual_seed(2))
    assert counts.dtype == positions.dtype == torch.long
    for seed, picked in zip(seeds.tolist(), _segments(counts, positions)):
        lo, hi = colptr[seed].item(), colptr[seed + 1].item()
        deg = hi - lo
        assert all(lo <= p < hi for p in picked)
        if replace:
            assert len(picked) == (k if deg > 0 else 0)
        else:
            assert len(picked) == min(deg, k)
            assert len(set(picked)) == len(picked)


def test_full_fanout_returns_every_entry_in_csc_order():
    colptr = _random_csc(50, 9, seed=3)
    seeds = torch.tensor([4, 0, 4, 49, 17])
    expected = [list(range(colptr[s].item(), colptr[s + 1].item())) for s in seeds.tolist()]
    for k, replace in [(-1, False), (-1, True), (1000, False)]:
        counts, positions = sample_neighbors(colptr, seeds, k, replace)
        assert _segments(counts, positions) == expected


def test_same_generator_seed_gives_the_same_sample():
    colptr = _random_csc(100, 30, seed=4)
    seeds = torch.arange(100)
    a = sample_neighbors(colptr, seeds, 5, False, torch.Generator().manual_seed(9))
    b = sample_neighbors(colptr, seeds, 5, False, torch.Generator().manual_seed(9))
    c = sample_neighbors(colptr, seeds, 5, False, torch.Generator().manual_seed(10))
    assert torch.equal(a[1], b[1]) and not torch.equal(a[1], c[1])


def test_empty_seed_batch():
    colptr = _random_csc(10, 3, seed=5)
    counts, positions = sample_neighbors(colptr, torch.empty(0, dtype=torch.long), 3)
    assert counts.numel() == 0 and positions.numel() == 0


def _chi_square(observed: torch.Tensor) -> float:
    expected = observed.float().mean()
    return float(((observed.float() - expected) ** 2 / expected).sum())


def test_subsets_without_replacement_are_uniform():
    # One seed with 5 entries, k=2: 10 possible subsets, each equally likely.
    colptr = torch.tensor([0, 5])
    draws = 20_000
    seeds = torch.zeros(draws, dtype=torch.long)
    counts, positions = sample_neighbors(colptr, seeds, 2, False,
                                         torch.Generator().manual_seed(0))
    assert torch.all(counts == 2)
    pairs = positions.view(-1, 2).sort(dim=1).values
    assert torch.all(pairs[:, 0] != pairs[:, 1])
    codes = pairs[:, 0] * 5 + pairs[:, 1]
    observed = torch.bincount(codes, minlength=25)[[a * 5 + b for a in range(5)
                                                    for b in range(a + 1, 5)]]
    assert int(observed.sum()) == draws
    # 9 degrees of freedom: p = 0.001 lies at 27.9; a loose bound of 40.
    assert _chi_square(observed) < 40


def test_draws_with_replacement_are_uniform():
    colptr = torch.tensor([0, 7])
    counts, positions = sample_neighbors(colptr, torch.zeros(3000, dtype=torch.long), 5, True,
                                         torch.Generator().manual_seed(0))
    assert torch.all(counts == 5)
    observed = torch.bincount(positions, minlength=7)
    # 6 degrees of freedom: p = 0.001 lies at 22.5; a loose bound of 35.
    assert _chi_square(observed) < 35


def test_mixed_degrees_keep_seed_order():
    # Seeds alternate between degree <= k (taken whole) and > k (sampled).
    colptr = torch.tensor([0, 2, 12, 13, 33])
    seeds = torch.tensor([1, 0, 3, 2, 1])
    counts, positions = sample_neighbors(colptr, seeds, 3, False,
                                         torch.Generator().manual_seed(0))
    assert counts.tolist() == [3, 2, 3, 1, 3]
    segs = _segments(counts, positions)
    assert sorted(segs[1]) == [0, 1] and segs[3] == [12]
    assert all(2 <= p < 12 for p in segs[0] + segs[4])
    assert all(13 <= p < 33 for p in segs[2])


def _dense(start, deg, k, generator):
    return ns._without_replacement_dense(start, deg, k, int(deg.max()), generator)


SUBSET_KERNELS = [ns._without_replacement, ns._without_replacement_floyd, _dense]
KERNEL_IDS = ["sort", "floyd", "dense"]


@pytest.mark.parametrize("kernel", SUBSET_KERNELS, ids=KERNEL_IDS)
def test_every_subset_kernel_draws_uniform_distinct_subsets(kernel):
    # 6 entries, k=3: 20 possible subsets, each equally likely, no repeats.
    draws = 20_000
    start = torch.zeros(draws, dtype=torch.long)
    deg = torch.full((draws,), 6)
    counts, positions = kernel(start, deg, 3, torch.Generator().manual_seed(0))
    assert torch.all(counts == 3)
    triples = positions.view(-1, 3).sort(dim=1).values
    assert torch.all(triples[:, 0] < triples[:, 1]) and torch.all(triples[:, 1] < triples[:, 2])
    assert int(triples.min()) >= 0 and int(triples.max()) < 6
    codes = (triples * torch.tensor([36, 6, 1])).sum(1)
    observed = torch.bincount(codes, minlength=216)
    observed = observed[observed > 0]
    assert observed.numel() == 20
    # 19 degrees of freedom: p = 0.001 lies at 43.8; a loose bound of 60.
    assert _chi_square(observed) < 60


@pytest.mark.parametrize("kernel", SUBSET_KERNELS, ids=KERNEL_IDS)
def test_every_subset_kernel_keeps_segments_and_seed_order(kernel):
    colptr = _random_csc(300, 25, seed=11)
    seeds = torch.randint(0, 300, (500,), generator=torch.Generator().manual_seed(2))
    start, deg = colptr[seeds], colptr[seeds + 1] - colptr[seeds]
    counts, positions = kernel(start, deg, 7, torch.Generator().manual_seed(3))
    assert counts.tolist() == deg.clamp(max=7).tolist()
    for seed, seg in zip(seeds.tolist(), _segments(counts, positions)):
        assert len(set(seg)) == len(seg)
        assert all(colptr[seed] <= p < colptr[seed + 1] for p in seg)


def test_big_frontiers_take_the_floyd_kernel_with_the_same_guarantees():
    colptr = _random_csc(5000, 40, seed=12)
    seeds = torch.arange(5000)
    deg = colptr[1:] - colptr[:-1]
    assert int(deg.sum()) >= ns._FLOYD_MIN_CANDIDATES_PER_STEP * 10  # Floyd is chosen
    a = sample_neighbors(colptr, seeds, 10, False, torch.Generator().manual_seed(5))
    b = ns._without_replacement_floyd(colptr[:-1], deg, 10, torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_small_frontiers_take_the_dense_kernel_and_large_ones_do_not():
    colptr = _random_csc(64, 20, seed=13)
    seeds = torch.arange(16)
    start, deg = colptr[seeds], colptr[seeds + 1] - colptr[seeds]
    a = sample_neighbors(colptr, seeds, 5, False, torch.Generator().manual_seed(6))
    b = _dense(start, deg, 5, torch.Generator().manual_seed(6))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # Past the cells that need no count, but with little padding: still dense.
    colptr = torch.arange(0, 20 * 101, 20)  # 100 seeds of degree 20
    seeds = torch.arange(100)
    start, deg = colptr[:-1], colptr[1:] - colptr[:-1]
    assert 100 * 20 > ns._DENSE_MIN_CELLS and 100 * 20 < ns._FLOYD_MIN_CANDIDATES_PER_STEP * 5
    a = sample_neighbors(colptr, seeds, 5, False, torch.Generator().manual_seed(8))
    b = _dense(start, deg, 5, torch.Generator().manual_seed(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # One hub among leaves pads the matrix far past the real entries: sort.
    colptr = torch.tensor([0, 5000, *range(5001, 5201)])
    seeds = torch.arange(201)
    start, deg = colptr[:-1], colptr[1:] - colptr[:-1]
    a = sample_neighbors(colptr, seeds, 300, False, torch.Generator().manual_seed(7))
    b = ns._without_replacement(start, deg, 300, torch.Generator().manual_seed(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
