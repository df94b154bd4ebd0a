"""The CSC pass's sort orders (``radix_order.stable_order``) and part rows
(``node_slices.part_rows``) against numpy's plain answers."""

from __future__ import annotations

import numpy as np
import pytest

from pyg_dist.partitioning.node_slices import part_rows
from pyg_dist.partitioning.radix_order import stable_order


@pytest.mark.parametrize("bound", [1, 2, 255, 1 << 16, (1 << 16) + 1, 1 << 33])
def test_stable_order_is_numpys_stable_argsort(bound):
    rng = np.random.default_rng(bound)
    keys = rng.integers(0, bound, 50_000, dtype=np.int64)
    keys[:3] = bound - 1  # the largest key, repeated
    expected = np.argsort(keys, kind="stable")
    assert np.array_equal(stable_order(keys, bound), expected)
    if bound < (1 << 31):
        assert np.array_equal(stable_order(keys.astype(np.int32), bound), expected)


def test_stable_order_refines_a_given_order_as_lexsort_does():
    rng = np.random.default_rng(1)
    major = rng.integers(0, 70_000, 20_000)
    minor = rng.permutation(20_000).astype(np.int64)  # e.g. edge ids from several ranks
    first = stable_order(minor, 20_000)
    assert np.array_equal(stable_order(major, 70_000, first), np.lexsort((minor, major)))


def test_stable_order_of_nothing_is_empty():
    assert stable_order(np.zeros(0, dtype=np.int64), 10).size == 0


@pytest.mark.parametrize("num_parts, window", [(1, 7), (5, 7), (300, 1 << 20), (3, 1)])
def test_part_rows_are_each_nodes_rank_within_its_part(num_parts, window):
    rng = np.random.default_rng(num_parts)
    book = rng.integers(0, num_parts, 1000).astype(np.uint8 if num_parts <= 256 else np.int16)
    rows = part_rows(book, num_parts, window)
    assert rows.dtype == np.int32
    for k in range(num_parts):
        owned = np.flatnonzero(book == k)
        assert np.array_equal(rows[owned], np.arange(owned.size))
