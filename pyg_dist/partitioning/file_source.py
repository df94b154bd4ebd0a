"""A graph read from files, in chunks: the input of ``pyg-dist partition --from DIR``.

The layout (``docs/partition-format.md``, "Input from files")::

    DIR/edges/*.parquet    columns src, dst (integers): one directed edge a row;
                           files are read in name order, rows in file order, so
                           edge ids are their running position
    DIR/nodes/NAME.npy     one array per node attribute (x.npy, y.npy,
                           train_mask.npy, ...); their first dimension is the
                           node count

Nothing here reads a whole column: edges come in record batches
(``pyarrow.parquet`` ``iter_batches``), node rows by ``pread`` of a window.
Node arrays are opened with ``np.load(mmap_mode="r")`` only to read their
header: rows are then read with ``pread`` because the pages of a mapping,
once touched, count in the process's RSS until it is unmapped.

Everything read is checked before use (ids in range, integer columns, no
nulls, no object arrays, names usable in the format), and problems are
:class:`~pyg_dist.errors.InvalidPartitionArgumentError` naming the file.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol, runtime_checkable

import numpy as np

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.file_names import RESERVED_NODE_NAMES
from pyg_dist.partitioning.safetensors_stream import NUMPY_DTYPES

logger = logging.getLogger(__name__)

ATTRIBUTE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
"""What a node attribute's file stem must look like (it becomes a tensor name)."""
EDGE_COLUMNS = ("src", "dst")


def _bad(message: str) -> InvalidPartitionArgumentError:
    return InvalidPartitionArgumentError(message)


@dataclass(frozen=True)
class NodeArray:
    """One node attribute, ``DIR/nodes/NAME.npy``, read by row windows.

    Args:
        name: The attribute (the file's stem).
        path: The file.
        dtype: Its dtype (one of the partition format's).
        shape: Its shape; ``shape[0]`` is the node count.
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
        """Rows ``start:stop`` as a fresh array (one ``pread``)."""
        count = stop - start
        buf = bytearray(count * self.row_bytes)
        with open(self.path, "rb", buffering=0) as f:
            view, pos = memoryview(buf), self.offset + start * self.row_bytes
            while view.nbytes:
                got = os.preadv(f.fileno(), [view], pos)
                if got == 0:
                    raise _bad(f"{self.path} is shorter than its header says; rewrite it")
                view, pos = view[got:], pos + got
        return np.frombuffer(buf, dtype=self.dtype).reshape((count, *self.shape[1:]))


def open_node_array(path: Path) -> NodeArray:
    """Reads and checks the header of a ``.npy`` node attribute.

    Raises:
        InvalidPartitionArgumentError: if the name is unusable or reserved,
            the file is not a C-ordered ``.npy`` of a supported dtype with at
            least one dimension, or it holds objects.
    """
    name = path.stem
    if not ATTRIBUTE_NAME.match(name) or name in RESERVED_NODE_NAMES:
        raise _bad(f"{path}: node attribute names must match {ATTRIBUTE_NAME.pattern} and "
                   f"not be one of {sorted(RESERVED_NODE_NAMES)}; rename the file")
    try:
        array = np.load(path, mmap_mode="r")  # allow_pickle=False: objects refused
    except (OSError, ValueError) as exc:
        raise _bad(f"{path} is not a readable .npy array: {str(exc)[:200]}") from exc
    if not isinstance(array, np.memmap):
        raise _bad(f"{path} is not a plain .npy array (a .npz or object array?)")
    try:
        if array.dtype not in NUMPY_DTYPES or array.dtype.byteorder == ">":
            raise _bad(f"{path}: dtype {array.dtype} is not one of "
                       f"{sorted(str(d) for d in NUMPY_DTYPES)} (little-endian)")
        if array.ndim < 1 or (array.ndim > 1 and not array.flags.c_contiguous):
            raise _bad(f"{path} must be a C-ordered array with a first (node) dimension")
        return NodeArray(name, path, array.dtype.newbyteorder("="), tuple(array.shape),
                         int(array.offset))
    finally:
        mapping = getattr(array, "_mmap", None)
        del array
        if mapping is not None:
            mapping.close()


@dataclass
class EdgeFile:
    """One parquet file of edges: its path, rows and largest row group."""

    path: Path
    num_rows: int
    max_row_group: int


@dataclass
class FileGraph:
    """A homogeneous graph laid out in files (see the module docstring).

    Build it with :meth:`open`, which reads only headers and footers.

    Args:
        root: ``DIR``.
        num_nodes: The node count (the node arrays' first dimension).
        edge_files: The edge files in reading order.
        node_arrays: The node attributes by name.
    """

    root: Path
    num_nodes: int
    edge_files: list[EdgeFile]
    node_arrays: dict[str, NodeArray] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        """Number of directed edges (rows of all edge files)."""
        return sum(f.num_rows for f in self.edge_files)

    @property
    def max_row_group(self) -> int:
        """Rows of the largest parquet row group (read whole by pyarrow)."""
        return max((f.max_row_group for f in self.edge_files), default=0)

    @classmethod
    def open(cls, root: os.PathLike | str, num_nodes: Optional[int] = None) -> FileGraph:
        """Finds and checks the files of ``root``.

        Args:
            root: The input directory.
            num_nodes: The node count when ``DIR/nodes`` holds no array
                (otherwise it must agree with them).

        Raises:
            InvalidPartitionArgumentError: if the layout is missing or
                malformed, or the node count is unknown or inconsistent.
        """
        root = Path(root)
        edge_dir, node_dir = root / "edges", root / "nodes"
        if not edge_dir.is_dir():
            raise _bad(f"{root} has no edges/ directory; see docs/partition-format.md, "
                       f"'Input from files', for the layout")
        paths = sorted(edge_dir.glob("*.parquet"))
        if not paths:
            raise _bad(f"{edge_dir} holds no .parquet file")
        edge_files = [_open_edge_file(p) for p in paths]
        arrays = {}
        if node_dir.is_dir():
            for path in sorted(node_dir.glob("*.npy")):
                array = open_node_array(path)
                arrays[array.name] = array
        counts = {a.shape[0] for a in arrays.values()}
        if len(counts) > 1:
            raise _bad(f"the arrays in {node_dir} disagree on the node count: "
                       + ", ".join(f"{a.name}: {a.shape[0]}" for a in arrays.values()))
        if counts and num_nodes is not None and num_nodes not in counts:
            raise _bad(f"num_nodes={num_nodes} but the arrays in {node_dir} have "
                       f"{counts.pop()} rows")
        count = counts.pop() if counts else num_nodes
        if not count:
            raise _bad(f"the node count of {root} is unknown or zero: add a node array "
                       f"(e.g. nodes/x.npy) or pass --num-nodes")
        mask = arrays.get("train_mask")
        if mask is not None and (mask.dtype != np.bool_ or len(mask.shape) != 1):
            raise _bad(f"{mask.path}: train_mask must be a 1-D bool array")
        return cls(root, int(count), edge_files, arrays)

    def warm_up(self) -> None:
        """Decodes a few rows of the first edge file and drops them.

        pyarrow's first decode maps its parquet code and sets up its
        allocator (60-70 MB of RSS with pyarrow 25, whatever the batch size);
        doing it before the memory budget measures the process counts that
        cost as the footprint it is, not as working memory.
        """
        for _ in self.edge_chunks(1024):
            break

    def edge_chunks(self, chunk_edges: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first edge id, src, dst)`` chunks of at most ``chunk_edges``
        edges (int64), in edge id order, every id checked to lie in
        ``[0, num_nodes)``.

        Raises:
            InvalidPartitionArgumentError: on an id out of range or a null.
        """
        import pyarrow.parquet as pq

        first = 0
        for edge_file in self.edge_files:
            # pre_buffer (pyarrow's default) reads whole row groups ahead, and
            # reader threads each grow an allocator arena: both cost RSS
            # beyond the chunk.
            with pq.ParquetFile(edge_file.path, pre_buffer=False,
                                buffer_size=1 << 20) as reader:
                for batch in reader.iter_batches(batch_size=max(1, chunk_edges),
                                                 columns=list(EDGE_COLUMNS),
                                                 use_threads=False):
                    src = self._column(batch, "src", edge_file.path, first)
                    dst = self._column(batch, "dst", edge_file.path, first)
                    yield first, src, dst
                    first += len(src)

    def _column(self, batch: Any, name: str, path: Path, first: int) -> np.ndarray:
        column = batch.column(name)
        if column.null_count:
            raise _bad(f"{path}: column {name!r} holds nulls (edges {first}..); every "
                       f"edge needs both ends")
        ids = column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
            raise _bad(f"{path}: column {name!r} holds ids outside [0, {self.num_nodes}) "
                       f"(edges {first}..{first + ids.size - 1}); fix the files or the "
                       f"node count")
        return ids


def _open_edge_file(path: Path) -> EdgeFile:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as reader:
            schema = reader.schema_arrow
            meta = reader.metadata
    except (OSError, pa.ArrowException) as exc:
        raise _bad(f"{path} is not a readable parquet file: {str(exc)[:200]}") from exc
    for name in EDGE_COLUMNS:
        index = schema.get_field_index(name)
        if index < 0 or not pa.types.is_integer(schema.field(index).type):
            raise _bad(f"{path} needs integer columns 'src' and 'dst'; it has "
                       f"{', '.join(f'{f.name}: {f.type}' for f in schema)[:300]}")
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return EdgeFile(path, int(meta.num_rows), max(groups, default=0))


class EdgeStream:
    """What a streaming partitioner sees: the node count, the edges in
    chunks (as many passes as it likes) and the training mask by windows.

    Args:
        graph: The file graph.
        chunk_edges: Edges per chunk (sized from the memory limit).
    """

    def __init__(self, graph: FileGraph, chunk_edges: int) -> None:
        self._graph = graph
        self.chunk_edges = int(chunk_edges)

    @property
    def num_nodes(self) -> int:
        """Number of nodes; ids are ``0 .. num_nodes - 1``."""
        return self._graph.num_nodes

    @property
    def num_edges(self) -> int:
        """Number of directed edges."""
        return self._graph.num_edges

    @property
    def has_train_mask(self) -> bool:
        """Whether ``nodes/train_mask.npy`` exists."""
        return "train_mask" in self._graph.node_arrays

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(src, dst)`` int64 arrays of at most :attr:`chunk_edges` edges,
        in edge id order; every call starts a new pass."""
        for _, src, dst in self._graph.edge_chunks(self.chunk_edges):
            yield src, dst

    def train_mask(self, start: int, stop: int) -> Optional[np.ndarray]:
        """``train_mask`` of nodes ``start:stop`` (``None`` without one)."""
        array = self._graph.node_arrays.get("train_mask")
        return None if array is None else array.read_rows(start, stop)


@runtime_checkable
class StreamingPartitioner(Protocol):
    """A partitioner plugin that also works from files, in bounded memory.

    The file path (``pyg-dist partition --from``) calls :meth:`assign_stream`
    when a plugin has it; plugins without it get the whole graph in memory
    when it fits the limit (see :func:`~pyg_dist.partitioning.out_of_core.partition_files`).
    """

    def assign_stream(self, stream: EdgeStream, num_parts: int) -> np.ndarray:
        """One part id in ``[0, num_parts)`` per node (an integer array of
        ``stream.num_nodes``); memory beyond that array must stay within
        a few chunks of ``stream.chunk_edges`` edges."""
        ...
