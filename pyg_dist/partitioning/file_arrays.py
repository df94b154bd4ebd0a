"""The pieces of a graph laid out in files, read in chunks: ``.npy`` arrays
by row windows (:class:`RowArray`) and a set of parquet edge files with their
edge attributes (:class:`EdgeSet`).

Nothing here reads a whole column: edges come in record batches
(``pyarrow.parquet`` ``iter_batches``), array rows by ``pread`` of a window.
Arrays are opened with ``np.load(mmap_mode="r")`` only to read their header:
rows are then read with ``pread`` because the pages of a mapping, once
touched, count in the process's RSS until it is unmapped.

Everything read is checked before use (ids in range, integer columns, no
nulls, no object arrays, names usable in the format), and problems are
:class:`~pyg_dist.errors.InvalidPartitionArgumentError` naming the file.
:mod:`~pyg_dist.partitioning.file_source` puts the pieces together.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.safetensors_stream import NUMPY_DTYPES

ATTRIBUTE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
"""What an attribute's file stem must look like (it becomes a tensor name)."""
EDGE_COLUMNS = ("src", "dst")


def bad_input(message: str) -> InvalidPartitionArgumentError:
    """The error of an unusable input file."""
    return InvalidPartitionArgumentError(message)


@dataclass(frozen=True)
class RowArray:
    """One node or edge attribute, a ``.npy`` file, read by row windows.

    Args:
        name: The attribute (the file's stem).
        path: The file.
        dtype: Its dtype (one of the partition format's).
        shape: Its shape; ``shape[0]`` is the node (edge) count.
        offset: Byte offset of the data in the file.
    """

    name: str
    path: Path
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as a fresh array (one ``pread``).

        The array is read into uninitialised memory: a zero-filled
        ``bytearray`` cost a ``memset`` of every byte besides the kernel's
        zeroing of its fresh pages (13% of the wall at 5.5 M nodes x 128
        float32), and numpy asks for huge pages where a ``bytearray`` does not.
        """
        count = stop - start
        rows = np.empty((count, *self.shape[1:]), dtype=self.dtype)
        with open(self.path, "rb", buffering=0) as f:
            view = memoryview(rows.reshape(-1).view(np.uint8))
            pos = self.offset + start * self.row_bytes
            while view.nbytes:
                got = os.preadv(f.fileno(), [view], pos)
                if got == 0:
                    raise bad_input(f"{self.path} is shorter than its header says; rewrite it")
                view, pos = view[got:], pos + got
        return rows


def open_row_array(path: Path, reserved: frozenset[str]) -> RowArray:
    """Reads and checks the header of a ``.npy`` attribute.

    Args:
        path: The file; its stem names the attribute.
        reserved: Names the partition format keeps for itself.

    Raises:
        InvalidPartitionArgumentError: if the name is unusable or reserved,
            the file is not a C-ordered ``.npy`` of a supported dtype with at
            least one dimension, or it holds objects.
    """
    name = path.stem
    if not ATTRIBUTE_NAME.match(name) or name in reserved:
        raise bad_input(f"{path}: attribute names must match {ATTRIBUTE_NAME.pattern} and "
                        f"not be one of {sorted(reserved)}; rename the file")
    try:
        array = np.load(path, mmap_mode="r")  # allow_pickle=False: objects refused
    except (OSError, ValueError) as exc:
        raise bad_input(f"{path} is not a readable .npy array: {str(exc)[:200]}") from exc
    if not isinstance(array, np.memmap):
        raise bad_input(f"{path} is not a plain .npy array (a .npz or object array?)")
    try:
        if array.dtype not in NUMPY_DTYPES or array.dtype.byteorder == ">":
            raise bad_input(f"{path}: dtype {array.dtype} is not one of "
                            f"{sorted(str(d) for d in NUMPY_DTYPES)} (little-endian)")
        if array.ndim < 1 or (array.ndim > 1 and not array.flags.c_contiguous):
            raise bad_input(f"{path} must be a C-ordered array with a first (row) dimension")
        return RowArray(name, path, array.dtype.newbyteorder("="), tuple(array.shape),
                        int(array.offset))
    finally:
        mapping = getattr(array, "_mmap", None)
        del array
        if mapping is not None:
            mapping.close()


def open_row_arrays(directory: Path, reserved: frozenset[str]) -> dict[str, RowArray]:
    """Every ``*.npy`` of ``directory`` (none if it does not exist), by name."""
    if not directory.is_dir():
        return {}
    arrays = [open_row_array(p, reserved) for p in sorted(directory.glob("*.npy"))]
    return {a.name: a for a in arrays}


def common_rows(arrays: dict[str, RowArray], where: Path) -> int | None:
    """The first dimension all ``arrays`` share (``None`` without arrays).

    Raises:
        InvalidPartitionArgumentError: if they disagree.
    """
    counts = {a.shape[0] for a in arrays.values()}
    if len(counts) > 1:
        raise bad_input(f"the arrays in {where} disagree on their row count: "
                        + ", ".join(f"{a.name}: {a.shape[0]}" for a in arrays.values()))
    return counts.pop() if counts else None


@dataclass
class EdgeFile:
    """One parquet file of edges: its path, rows and largest row group."""

    path: Path
    num_rows: int
    max_row_group: int


def open_edge_file(path: Path) -> EdgeFile:
    """Reads and checks the footer of a parquet edge file.

    Raises:
        InvalidPartitionArgumentError: if it is unreadable or lacks integer
            ``src`` and ``dst`` columns.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as reader:
            schema = reader.schema_arrow
            meta = reader.metadata
    except (OSError, pa.ArrowException) as exc:
        raise bad_input(f"{path} is not a readable parquet file: {str(exc)[:200]}") from exc
    for name in EDGE_COLUMNS:
        index = schema.get_field_index(name)
        if index < 0 or not pa.types.is_integer(schema.field(index).type):
            raise bad_input(f"{path} needs integer columns 'src' and 'dst'; it has "
                            f"{', '.join(f'{f.name}: {f.type}' for f in schema)[:300]}")
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return EdgeFile(path, int(meta.num_rows), max(groups, default=0))


@dataclass
class EdgeSet:
    """The edges of one edge type: parquet files read in name order (edge id
    ``j`` is the ``j``-th row overall) and one ``.npy`` per edge attribute
    (row ``j`` belongs to edge ``j``).

    Args:
        directory: Where the files lie (for messages).
        files: The parquet files in reading order.
        num_src: Sources must lie in ``[0, num_src)``.
        num_dst: Destinations must lie in ``[0, num_dst)``.
        arrays: The edge attributes by name.
    """

    directory: Path
    files: list[EdgeFile]
    num_src: int
    num_dst: int
    arrays: dict[str, RowArray] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        """Number of directed edges (rows of all files)."""
        return sum(f.num_rows for f in self.files)

    @property
    def max_row_group(self) -> int:
        """Rows of the largest parquet row group (read whole by pyarrow)."""
        return max((f.max_row_group for f in self.files), default=0)

    @property
    def attribute_row_bytes(self) -> int:
        """Bytes of one edge's attributes."""
        return sum(a.row_bytes for a in self.arrays.values())

    def check_arrays(self) -> None:
        """Every edge attribute has one row per edge.

        Raises:
            InvalidPartitionArgumentError: if one has another row count.
        """
        for array in self.arrays.values():
            if array.shape[0] != self.num_edges:
                raise bad_input(f"{array.path} has {array.shape[0]} rows but "
                                f"{self.directory} holds {self.num_edges} edges; an edge "
                                f"attribute needs one row per edge, in edge order")

    def chunks(self, chunk_edges: int, files: Optional[range] = None
               ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first edge id, src, dst)`` chunks of at most ``chunk_edges``
        edges (int64), in edge id order, every id checked to be in range.

        Args:
            chunk_edges: Edges per chunk.
            files: Read only these files (by index; edge ids stay global).

        Raises:
            InvalidPartitionArgumentError: on an id out of range or a null.
        """
        import pyarrow.parquet as pq

        files = range(len(self.files)) if files is None else files
        first = sum(f.num_rows for f in self.files[:files.start])
        for edge_file in (self.files[i] for i in files):
            # pre_buffer (pyarrow's default) reads whole row groups ahead, and
            # reader threads each grow an allocator arena: both cost RSS
            # beyond the chunk.
            with pq.ParquetFile(edge_file.path, pre_buffer=False,
                                buffer_size=1 << 20) as reader:
                for batch in reader.iter_batches(batch_size=max(1, chunk_edges),
                                                 columns=list(EDGE_COLUMNS),
                                                 use_threads=False):
                    src = _column(batch, "src", edge_file.path, first, self.num_src)
                    dst = _column(batch, "dst", edge_file.path, first, self.num_dst)
                    del batch
                    yield first, src, dst
                    first += len(src)


def _column(batch: Any, name: str, path: Path, first: int, bound: int) -> np.ndarray:
    column = batch.column(name)
    if column.null_count:
        raise bad_input(f"{path}: column {name!r} holds nulls (edges {first}..); every "
                        f"edge needs both ends")
    ids = column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= bound):
        raise bad_input(f"{path}: column {name!r} holds ids outside [0, {bound}) "
                        f"(edges {first}..{first + ids.size - 1}); fix the files or the "
                        f"node count")
    return ids
