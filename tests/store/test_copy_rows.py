"""``copy_rows``: the trainer's scatter of fetched rows into a batch tensor."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.store.remote_feature_store import copy_rows


@pytest.mark.parametrize("row_shape,dtype", [
    ((128,), torch.float32),  # 512-byte rows: copied as 16-byte elements
    ((), torch.int64),        # labels: 8-byte rows
    ((3,), torch.float16),    # 6-byte rows: 2-byte elements
    ((5,), torch.uint8),      # odd byte count: byte elements
    ((2, 3), torch.float64),  # rows of more than one dimension
    ((), torch.bool),         # falls back to index_copy_
])
def test_copy_rows_equals_index_copy(row_shape, dtype):
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 2, (300, *row_shape), generator=gen).to(dtype) if dtype == torch.bool \
        else torch.randint(-100, 100, (300, *row_shape), generator=gen).to(dtype)
    positions = torch.randperm(500, generator=gen)[:300]
    out = torch.zeros((500, *row_shape), dtype=dtype)
    expected = out.clone().index_copy_(0, positions, rows)
    copy_rows(out, positions, rows)
    assert torch.equal(out, expected)


def test_copy_rows_keeps_every_bit_of_nan_payloads():
    # Random bit patterns: about a third of the rows hold NaNs with payloads,
    # which a copy through float arithmetic could canonicalise.
    bits = torch.randint(-2**31, 2**31 - 1, (1000, 128), dtype=torch.int32,
                         generator=torch.Generator().manual_seed(1))
    rows = bits.view(torch.float32)
    assert torch.isnan(rows).any()
    positions = torch.randperm(1000)
    out = torch.empty(1000, 128)
    copy_rows(out, positions, rows)
    assert torch.equal(out.view(torch.int32)[positions], bits)


def test_copy_rows_falls_back_for_non_contiguous_sources():
    rows = torch.arange(200, dtype=torch.float32).view(20, 10).t()  # [10, 20], strided
    positions = torch.tensor([9, 0, 3, 5, 1, 2, 4, 6, 7, 8])
    out = torch.zeros(10, 20)
    copy_rows(out, positions, rows)
    assert torch.equal(out, torch.zeros(10, 20).index_copy_(0, positions, rows))
