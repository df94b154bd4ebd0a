"""The partition book: which part owns a global node id.

A compact array indexed by global id (``uint8`` up to 255 parts, ``int16``
beyond): one byte per node on a trainer, no topology. Lookups are one
vectorised index; :meth:`PartitionBook.split` groups a batch of ids by owner
and keeps the positions that put the answers back in the caller's order.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from pyg_dist.dtypes import DTYPES
from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.dataset_dir import book_dtype_name

# Up to this many parts, split() groups ids with one mask per part (numpy:
# a compare and a flatnonzero, then one gather of the part's ids); beyond,
# with one stable radix sort of their part ids (a counting pass and a
# scatter) and one bincount. Measured on one core, 146k ids of a 600k-node
# book, caches flushed between calls (us, masks / sort; load ~4): 2 parts
# 739 / 1084, 4 parts 874 / 1201, 6 parts 1180 / 1014, 8 parts 1042 / 1112,
# 16 parts 2798 / 693. Inside the loader (4 parts, 600k nodes) the sort's
# steps took 1.08 ms a batch: looking the parts up 350 us (the book is cold
# after the servers ran), bincount 146, argsort 389, gathering the ids 117,
# cutting 74.
_MASK_SPLIT_MAX_PARTS = 4


def book_dtype(num_parts: int) -> torch.dtype:
    """The smallest dtype holding part ids ``0 .. num_parts - 1``
    (:func:`~pyg_dist.partitioning.dataset_dir.book_dtype_name`)."""
    return DTYPES[book_dtype_name(num_parts)]


class PartitionBook:
    """Maps global node ids to the part that owns them.

    Args:
        node_part: One part id per global node id (any integer dtype; stored
            in the compact dtype of :func:`book_dtype`).
        num_parts: Number of parts. Parts may own no node.

    Raises:
        InvalidPartitionArgumentError: if ``node_part`` is not a 1-D integer
            tensor with values in ``[0, num_parts)``.
    """

    def __init__(self, node_part: Tensor, num_parts: int) -> None:
        if not isinstance(node_part, Tensor) or node_part.dim() != 1 \
                or node_part.is_floating_point() or node_part.dtype == torch.bool:
            raise InvalidPartitionArgumentError(
                "a partition book needs a 1-D integer tensor of part ids")
        if num_parts < 1:
            raise InvalidPartitionArgumentError(f"num_parts must be >= 1, got {num_parts}")
        if node_part.numel() and (int(node_part.min()) < 0
                                  or int(node_part.max()) >= num_parts):
            raise InvalidPartitionArgumentError(
                f"part ids must lie in [0, {num_parts}); got "
                f"[{int(node_part.min())}, {int(node_part.max())}]")
        self._parts = node_part.to(book_dtype(num_parts)).contiguous()
        self._num_parts = int(num_parts)

    @property
    def num_parts(self) -> int:
        """Number of parts."""
        return self._num_parts

    @property
    def num_nodes(self) -> int:
        """Number of global node ids the book covers."""
        return int(self._parts.numel())

    def _check(self, ids: Tensor) -> Tensor:
        ids = self._as_ids(ids)
        if ids.numel():
            low, high = (int(v) for v in torch.aminmax(ids))
            if low < 0 or high >= self.num_nodes:
                raise self._out_of_range(ids)
        return ids

    @staticmethod
    def _as_ids(ids: Tensor) -> Tensor:
        if not isinstance(ids, Tensor) or ids.is_floating_point() or ids.dtype == torch.bool:
            raise InvalidPartitionArgumentError("node ids must be an integer tensor")
        return ids.view(-1).to(torch.int64)

    def _out_of_range(self, ids: Tensor) -> InvalidPartitionArgumentError:
        low, high = (int(v) for v in torch.aminmax(ids))
        return InvalidPartitionArgumentError(
            f"node ids must lie in [0, {self.num_nodes}); got [{low}, {high}]")

    def part_of(self, ids: Tensor) -> Tensor:
        """The owning part (int64) of every id in ``ids`` (any shape, flattened).

        Raises:
            InvalidPartitionArgumentError: if an id is out of range.
        """
        ids = self._check(ids)
        return self._parts[ids.to(self._parts.device)].to(torch.int64)

    def split(self, ids: Tensor) -> list[tuple[int, Tensor, Tensor]]:
        """Groups ``ids`` by owning part.

        The lookup of the ids' parts is also their range check (an id
        outside the book fails the gather; the min and max are computed only
        then, for the message), so a batch's ids are read twice in all: once
        to look their parts up, once to group them.

        Returns:
            ``(part, positions, ids[positions])`` for every part owning at least
            one of the ids, parts ascending; ``positions`` (int64) index into
            the flattened ``ids`` and keep their relative order, so
            ``out[positions] = answer`` restores the caller's order.

        Raises:
            InvalidPartitionArgumentError: if ``ids`` is not an integer
                tensor or holds an id outside the book.
        """
        ids = self._as_ids(ids)
        try:
            parts = self._parts.index_select(0, ids)
        except (IndexError, RuntimeError):
            raise self._out_of_range(ids) from None
        if self._num_parts == 1:
            # A copy, as every other share is: callers may write into it.
            return [(0, torch.arange(ids.numel()), ids.clone())] if ids.numel() else []
        if self._num_parts <= _MASK_SPLIT_MAX_PARTS and parts.device.type == "cpu":
            return _split_by_masks(ids, parts, self._num_parts)
        counts = torch.bincount(parts, minlength=self._num_parts).tolist() \
            if parts.dtype == torch.uint8 else \
            torch.bincount(parts.to(torch.int64), minlength=self._num_parts).tolist()
        return shares_by_part(ids, _stable_order(parts), counts)

    def counts(self) -> Tensor:
        """Number of nodes owned by every part (int64, ``[num_parts]``)."""
        return torch.bincount(self._parts.to(torch.int64), minlength=self._num_parts)

    def owned(self, part: int) -> Tensor:
        """The sorted global ids owned by ``part`` (int64)."""
        return (self._parts == part).nonzero().view(-1)

    def to_tensor(self) -> Tensor:
        """The compact ``node_part`` array (``uint8`` or ``int16``), for the wire."""
        return self._parts

    @classmethod
    def from_tensor(cls, tensor: Tensor, num_parts: Optional[int] = None) -> PartitionBook:
        """Rebuilds a book from :meth:`to_tensor` output.

        Args:
            tensor: The ``node_part`` array.
            num_parts: Number of parts; ``None`` infers ``max + 1`` (which
                misses trailing empty parts: pass it when known).
        """
        if num_parts is None:
            num_parts = int(tensor.max()) + 1 if tensor.numel() else 1
        return cls(tensor, num_parts)

    def __repr__(self) -> str:
        return f"PartitionBook(num_nodes={self.num_nodes}, num_parts={self.num_parts})"


def shares_by_part(ids: Tensor, order: Tensor, counts: list[int]
                   ) -> list[tuple[int, Tensor, Tensor]]:
    """:meth:`PartitionBook.split`'s answer from an order that groups the
    positions of ``ids`` by part (parts ascending) and each part's count:
    ``(part, positions, ids[positions])`` for every part with ids. Whoever
    grouped them (a book, the edge book, a coordinator's reply) shares it."""
    grouped = ids.index_select(0, order)
    return [(part, positions, part_ids) for part, (positions, part_ids)
            in enumerate(zip(order.split(counts), grouped.split(counts)))
            if positions.numel()]


def _split_by_masks(ids: Tensor, parts: Tensor, num_parts: int
                    ) -> list[tuple[int, Tensor, Tensor]]:
    """:meth:`PartitionBook.split` of CPU ``ids`` by one mask per part, in
    numpy: ``flatnonzero`` and ``take`` run with SIMD where ``Tensor.nonzero``
    and ``index_select`` step one element at a time (as
    :mod:`pyg_dist.kernels.compact`, which this package must not import).
    A part owning none of the ids costs its compare only."""
    part_of = parts.numpy()
    flat = ids.contiguous().numpy()
    out = []
    for part in range(num_parts):
        positions = np.flatnonzero(part_of == part)
        if positions.size:
            out.append((part, torch.from_numpy(positions.astype(np.int64, copy=False)),
                        torch.from_numpy(flat.take(positions))))
    return out


def _stable_order(parts: Tensor) -> Tensor:
    """The permutation that sorts ``parts`` stably (int64): on the CPU
    numpy's radix sort of 8- and 16-bit keys, one pass over the ids."""
    if parts.device.type == "cpu" and parts.is_contiguous():
        return torch.from_numpy(np.argsort(parts.numpy(), kind="stable").astype(np.int64,
                                                                                  copy=False))
    return torch.sort(parts, stable=True).indices
