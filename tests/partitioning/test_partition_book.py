"""PartitionBook: vectorised owner lookup, split and wire round trip."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning import PartitionBook


def test_part_of_and_counts():
    book = PartitionBook(torch.tensor([2, 0, 1, 2, 0]), 3)
    assert book.num_parts == 3 and book.num_nodes == 5
    assert book.part_of(torch.tensor([4, 0, 3])).tolist() == [0, 2, 2]
    assert book.part_of(torch.tensor([4, 0, 3])).dtype == torch.int64
    assert book.counts().tolist() == [2, 1, 2]
    assert book.owned(2).tolist() == [0, 3]
    assert book.to_tensor().dtype == torch.uint8


def test_split_groups_by_part_and_restores_order():
    gen = torch.Generator().manual_seed(0)
    book = PartitionBook(torch.randint(0, 5, (1000,), generator=gen), 5)
    ids = torch.randint(0, 1000, (300,), generator=gen)
    groups = book.split(ids)
    assert [g[0] for g in groups] == sorted({int(p) for p in book.part_of(ids)})
    restored = torch.full_like(ids, -1)
    for part, positions, part_ids in groups:
        assert bool((book.part_of(part_ids) == part).all())
        assert bool((positions[1:] > positions[:-1]).all()), "caller order kept within a part"
        restored[positions] = part_ids
    assert torch.equal(restored, ids)


def test_split_skips_parts_with_no_ids_and_handles_empty_input():
    book = PartitionBook(torch.tensor([0, 0, 3]), 4)
    assert [g[0] for g in book.split(torch.tensor([2, 0]))] == [0, 3]
    assert book.split(torch.empty(0, dtype=torch.long)) == []


def test_wire_round_trip_and_int16_beyond_255_parts():
    book = PartitionBook(torch.arange(600) % 300, 300)
    assert book.to_tensor().dtype == torch.int16
    again = PartitionBook.from_tensor(book.to_tensor(), 300)
    assert torch.equal(again.part_of(torch.arange(600)), torch.arange(600) % 300)
    # Inferred num_parts misses trailing empty parts, so callers pass it when known.
    assert PartitionBook.from_tensor(torch.tensor([0, 1], dtype=torch.uint8)).num_parts == 2


@pytest.mark.parametrize("bad", [torch.tensor([-1]), torch.tensor([7])])
def test_book_rejects_out_of_range_parts(bad):
    with pytest.raises(InvalidPartitionArgumentError):
        PartitionBook(bad, 3)


def test_lookup_rejects_out_of_range_ids():
    book = PartitionBook(torch.zeros(4, dtype=torch.long), 1)
    with pytest.raises(InvalidPartitionArgumentError, match="0, 4"):
        book.part_of(torch.tensor([4]))
    with pytest.raises(InvalidPartitionArgumentError):
        book.split(torch.tensor([-1]))
    with pytest.raises(InvalidPartitionArgumentError):
        book.part_of(torch.tensor([0.5]))


@pytest.mark.parametrize("num_parts", [1, 2, 3, 4, 16, 300])
def test_split_by_masks_and_by_sort_agree_with_brute_force(num_parts):
    # Up to 4 parts split() uses one mask per part, beyond that one stable
    # sort (uint8 part ids; int16 beyond 256 parts).
    gen = torch.Generator().manual_seed(num_parts)
    book = PartitionBook(torch.randint(0, num_parts, (1000,), generator=gen), num_parts)
    ids = torch.randint(0, 1000, (5000,), generator=gen)
    owners = book.part_of(ids).tolist()
    expected = {}
    for position, (node, part) in enumerate(zip(ids.tolist(), owners)):
        expected.setdefault(part, []).append((position, node))
    groups = book.split(ids)
    assert [g[0] for g in groups] == sorted(expected)
    for part, positions, part_ids in groups:
        assert list(zip(positions.tolist(), part_ids.tolist())) == expected[part]


@pytest.mark.parametrize("num_parts", [2, 8, 300])
def test_split_refuses_out_of_range_ids_whatever_the_grouping(num_parts):
    # The range check is the parts lookup itself (no separate min/max pass).
    book = PartitionBook(torch.arange(10) % num_parts, num_parts)
    for bad in ([10], [-1], [3, 2**40]):
        with pytest.raises(InvalidPartitionArgumentError, match=r"\[0, 10\)"):
            book.split(torch.tensor(bad))
