"""The partition book of a heterogeneous graph: one :class:`PartitionBook`
per node type, since node ids are numbered per type (``("paper", 7)`` and
``("author", 7)`` are different nodes)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError, UnknownTypeError
from pyg_dist.partitioning.book import PartitionBook


class HeteroPartitionBook(Mapping):
    """Maps ``(node_type, global id)`` to the part that owns the node.

    A read-only mapping from node type to that type's
    :class:`~pyg_dist.partitioning.book.PartitionBook`, plus typed
    :meth:`part_of` / :meth:`split`.

    Args:
        books: Node type -> its book; every book must have ``num_parts`` parts.
        num_parts: Number of parts.

    Raises:
        InvalidPartitionArgumentError: if there is no node type or a book
            has another number of parts.
    """

    def __init__(self, books: Mapping[str, PartitionBook], num_parts: int) -> None:
        if not books:
            raise InvalidPartitionArgumentError("a heterogeneous book needs a node type")
        for node_type, book in books.items():
            if book.num_parts != num_parts:
                raise InvalidPartitionArgumentError(
                    f"the book of node type {node_type!r} has {book.num_parts} parts, "
                    f"expected {num_parts}")
        self._books = dict(books)
        self._num_parts = int(num_parts)

    @property
    def num_parts(self) -> int:
        """Number of parts."""
        return self._num_parts

    @property
    def node_types(self) -> list[str]:
        """The node types, in the dataset's order."""
        return list(self._books)

    def __getitem__(self, node_type: str) -> PartitionBook:
        book = self._books.get(node_type) if isinstance(node_type, str) else None
        if book is None:
            raise UnknownTypeError("node", node_type, self.node_types)
        return book

    def __iter__(self) -> Iterator[str]:
        return iter(self._books)

    def __len__(self) -> int:
        return len(self._books)

    def part_of(self, node_type: str, ids: Tensor) -> Tensor:
        """The owning part (int64) of every id of ``node_type`` in ``ids``.

        Raises:
            UnknownTypeError: if the graph has no such node type.
            InvalidPartitionArgumentError: if an id is out of range.
        """
        return self[node_type].part_of(ids)

    def split(self, node_type: str, ids: Tensor) -> list[tuple[int, Tensor, Tensor]]:
        """Groups ids of ``node_type`` by owning part, as
        :meth:`PartitionBook.split <pyg_dist.partitioning.book.PartitionBook.split>`.

        Raises:
            UnknownTypeError: if the graph has no such node type.
        """
        return self[node_type].split(ids)

    def counts(self) -> dict[str, Tensor]:
        """Node type -> number of its nodes owned by every part."""
        return {t: book.counts() for t, book in self._books.items()}

    def __repr__(self) -> str:
        sizes = ", ".join(f"{t}={b.num_nodes}" for t, b in self._books.items())
        return f"HeteroPartitionBook(num_parts={self._num_parts}, {sizes})"
