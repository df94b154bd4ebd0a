"""A graph read from files, in chunks: the input of ``pyg-dist partition --from DIR``.

Two layouts (``docs/partition-format.md``, "Input from files")::

    homogeneous                           heterogeneous (by type)
    DIR/edges/*.parquet                   DIR/edges/SRC__REL__DST/*.parquet
    DIR/edges/NAME.npy  (edge attribute)  DIR/edges/SRC__REL__DST/NAME.npy
    DIR/nodes/NAME.npy  (node attribute)  DIR/nodes/TYPE/NAME.npy
                                          DIR/graph.json (optional: type order
                                          and node counts)

Parquet files hold integer columns ``src``, ``dst``, one directed edge a
row; files are read in name order, rows in file order, so edge ids are their
running position, and row ``j`` of an edge attribute belongs to edge ``j``.
The first dimension of the node arrays is the node count.

:class:`FileGraph` serves both, keyed by type as the partition format is
(``None`` for a homogeneous graph), and gives partitioner plugins the same
homogeneous view :meth:`GraphParts.partition_input
<pyg_dist.partitioning.inputs.GraphParts.partition_input>` gives
them in memory: node types concatenated in the graph's order, every edge type
shifted alike, edge types in order.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol, Union, runtime_checkable

import numpy as np

from pyg_dist.partitioning.file_arrays import (
    EdgeSet,
    RowArray,
    bad_input,
    common_rows,
    open_edge_file,
    open_row_arrays,
)
from pyg_dist.partitioning.file_names import (
    RESERVED_EDGE_NAMES,
    RESERVED_NODE_NAMES,
    edge_ends,
    type_name_problem,
)

logger = logging.getLogger(__name__)

GRAPH_FILE = "graph.json"
MAX_GRAPH_FILE_BYTES = 1 << 20
NodeKey = Optional[str]
EdgeKey = Optional[tuple[str, str, str]]


@dataclass
class NodeSet:
    """The nodes of one node type: their count and attributes by name."""

    num_nodes: int
    arrays: dict[str, RowArray] = field(default_factory=dict)


@dataclass
class FileGraph:
    """A graph laid out in files (see the module docstring), by type.

    Build it with :meth:`open`, which reads only headers and footers.

    Args:
        root: ``DIR`` (``None``: an in-memory graph,
            :func:`~pyg_dist.partitioning.memory_source.graph_source`).
        nodes: Node type (``None`` when homogeneous) -> its nodes, in order.
        edges: Edge type (``None`` when homogeneous) -> its edges, in order.
    """

    root: Optional[Path]
    nodes: dict[NodeKey, NodeSet]
    edges: dict[EdgeKey, EdgeSet]

    @property
    def is_hetero(self) -> bool:
        """Whether the graph has named types."""
        return None not in self.nodes

    @property
    def num_nodes(self) -> int:
        """Nodes over all node types."""
        return sum(n.num_nodes for n in self.nodes.values())

    @property
    def num_edges(self) -> int:
        """Directed edges over all edge types."""
        return sum(e.num_edges for e in self.edges.values())

    @property
    def max_row_group(self) -> int:
        """Rows of the largest parquet row group (read whole by pyarrow)."""
        return max((e.max_row_group for e in self.edges.values()), default=0)

    def offsets(self) -> dict[NodeKey, int]:
        """Node type -> the view id of its first node."""
        out, start = {}, 0
        for key, node_set in self.nodes.items():
            out[key] = start
            start += node_set.num_nodes
        return out

    @classmethod
    def open(cls, root: Union[os.PathLike, str], num_nodes: Optional[int] = None) -> FileGraph:
        """Finds and checks the files of ``root`` (either layout).

        Args:
            root: The input directory.
            num_nodes: The node count of a homogeneous graph whose
                ``DIR/nodes`` holds no array (otherwise it must agree with
                them).

        Raises:
            InvalidPartitionArgumentError: if the layout is missing or
                malformed, or a node count is unknown or inconsistent.
        """
        root = Path(root)
        edge_dir = root / "edges"
        if not edge_dir.is_dir():
            raise bad_input(f"{root} has no edges/ directory; see docs/partition-format.md, "
                            f"'Input from files', for the layout")
        typed = sorted(p for p in edge_dir.iterdir() if p.is_dir())
        if typed or (root / GRAPH_FILE).exists():
            if list(edge_dir.glob("*.parquet")):
                raise bad_input(f"{edge_dir} mixes parquet files with edge type directories; "
                                f"a heterogeneous graph keeps every edge in SRC__REL__DST/")
            if num_nodes is not None:
                raise bad_input("--num-nodes is for a homogeneous graph; give the node "
                                f"counts of a heterogeneous one in {root / GRAPH_FILE}")
            return _open_hetero(root, typed)
        return _open_homogeneous(root, num_nodes)

    def warm_up(self) -> None:
        """Decodes a few rows of the first edge file and drops them.

        pyarrow's first decode maps its parquet code and sets up its
        allocator (60-70 MB of RSS with pyarrow 25, whatever the batch size);
        doing it before the memory budget measures the process counts that
        cost as the footprint it is, not as working memory.
        """
        for edge_set in self.edges.values():
            if edge_set.files:
                for _ in edge_set.chunks(1024):
                    break
                return

    def view_chunks(self, chunk_edges: int, share: Optional[tuple[int, int]] = None
                    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(src, dst)`` of the homogeneous view, ``chunk_edges`` edges a
        chunk (the last may be short) whatever the files' batches: the chunks
        an in-memory partitioner cuts from the view's ``edge_index``.

        Args:
            chunk_edges: Edges per chunk.
            share: ``(rank, world_size)``: only the ``rank``-th of
                ``world_size`` ranges of the parquet files, counted over
                every edge type in view order (default: all of them).
        """
        offsets = self.offsets()
        held: list[tuple[np.ndarray, np.ndarray]] = []
        size = 0
        for key, edge_set, files in self._shared_files(share):
            shift_src, shift_dst = (offsets[t] for t in edge_ends(key))
            for _, src, dst in edge_set.chunks(chunk_edges, files):
                # pyarrow's int64 columns come read-only: shift into copies.
                src = src + shift_src if shift_src else src
                dst = dst + shift_dst if shift_dst else dst
                while src.size:
                    take = min(src.size, chunk_edges - size)
                    held.append((src[:take], dst[:take]))
                    size += take
                    src, dst = src[take:], dst[take:]
                    if size == chunk_edges:
                        yield _joined(held)
                        held, size = [], 0
        if size:
            yield _joined(held)

    def _shared_files(self, share: Optional[tuple[int, int]]
                      ) -> Iterator[tuple[EdgeKey, EdgeSet, range]]:
        """Every edge type with the range of its files in ``share``."""
        rank, world = share or (0, 1)
        total = sum(len(e.files) for e in self.edges.values())
        lo, hi = total * rank // world, total * (rank + 1) // world
        first = 0
        for key, edge_set in self.edges.items():
            start, stop = max(lo, first), min(hi, first + len(edge_set.files))
            if start < stop:
                yield key, edge_set, range(start - first, stop - first)
            first += len(edge_set.files)

    def has_train_mask(self) -> bool:
        """Whether some node type has a ``train_mask``."""
        return any("train_mask" in n.arrays for n in self.nodes.values())

    def view_train_mask(self, start: int, stop: int) -> np.ndarray:
        """``train_mask`` of view nodes ``start:stop`` (``False`` for types
        without one)."""
        out = np.zeros(stop - start, dtype=np.bool_)
        for key, first in self.offsets().items():
            node_set = self.nodes[key]
            lo, hi = max(start, first), min(stop, first + node_set.num_nodes)
            mask = node_set.arrays.get("train_mask")
            if lo < hi and mask is not None:
                out[lo - start:hi - start] = mask.read_rows(lo - first, hi - first)
        return out


def _joined(held: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if len(held) == 1:
        return held[0]
    return np.concatenate([s for s, _ in held]), np.concatenate([d for _, d in held])


def _edge_set(directory: Path, num_src: int, num_dst: int) -> EdgeSet:
    paths = sorted(directory.glob("*.parquet"))
    if not paths:
        raise bad_input(f"{directory} holds no .parquet file")
    edges = EdgeSet(directory, [open_edge_file(p) for p in paths], num_src, num_dst,
                    open_row_arrays(directory, RESERVED_EDGE_NAMES))
    edges.check_arrays()
    return edges


def _check_train_mask(arrays: dict[str, RowArray]) -> None:
    mask = arrays.get("train_mask")
    if mask is not None and (mask.dtype != np.bool_ or len(mask.shape) != 1):
        raise bad_input(f"{mask.path}: train_mask must be a 1-D bool array")


def _open_homogeneous(root: Path, num_nodes: Optional[int]) -> FileGraph:
    node_dir = root / "nodes"
    arrays = open_row_arrays(node_dir, RESERVED_NODE_NAMES)
    rows = common_rows(arrays, node_dir)
    if rows is not None and num_nodes is not None and num_nodes != rows:
        raise bad_input(f"num_nodes={num_nodes} but the arrays in {node_dir} have {rows} rows")
    count = rows if rows is not None else num_nodes
    if not count:
        raise bad_input(f"the node count of {root} is unknown or zero: add a node array "
                        f"(e.g. nodes/x.npy) or pass --num-nodes")
    _check_train_mask(arrays)
    edges = _edge_set(root / "edges", int(count), int(count))
    return FileGraph(root, {None: NodeSet(int(count), arrays)}, {None: edges})


def _open_hetero(root: Path, edge_dirs: list[Path]) -> FileGraph:
    declared_nodes, declared_edges = _read_graph_file(root / GRAPH_FILE)
    edge_types = {}
    for path in edge_dirs:
        parts = path.name.split("__")
        if len(parts) != 3 or any(type_name_problem(p) for p in parts):
            raise bad_input(f"{path}: an edge type directory is named SRC__REL__DST, three "
                            f"type names without '__' (docs/partition-format.md)")
        edge_types[tuple(parts)] = path
    node_dir = root / "nodes"
    node_dirs = {p.name: p for p in sorted(node_dir.iterdir()) if p.is_dir()} \
        if node_dir.is_dir() else {}
    names = set(node_dirs) | {t for et in edge_types for t in (et[0], et[2])}
    order = list(declared_nodes) if declared_nodes is not None else sorted(names)
    if declared_nodes is not None and not names <= set(order):
        raise bad_input(f"{root / GRAPH_FILE} does not list the node types "
                        f"{sorted(names - set(order))[:10]} that {root} holds")
    _check_type_names(order, root)
    nodes = {t: _node_set(t, node_dirs.get(t), declared_nodes, root) for t in order}
    if not sum(n.num_nodes for n in nodes.values()):
        raise bad_input(f"{root} has no nodes; there is nothing to partition")
    if declared_edges is not None:
        if set(declared_edges) != set(edge_types) or len(declared_edges) != len(edge_types):
            raise bad_input(f"{root / GRAPH_FILE} lists edge types that differ from the "
                            f"directories in {root / 'edges'}; list each once")
        edge_types = {et: edge_types[et] for et in declared_edges}
    if not edge_types:
        raise bad_input(f"{root / 'edges'} holds no edge type directory")
    edges = {et: _edge_set(path, nodes[et[0]].num_nodes, nodes[et[2]].num_nodes)
             for et, path in edge_types.items()}
    return FileGraph(root, nodes, edges)


def _node_set(name: str, directory: Optional[Path], declared: Optional[dict[str, int]],
              root: Path) -> NodeSet:
    arrays = open_row_arrays(directory, RESERVED_NODE_NAMES) if directory else {}
    rows = common_rows(arrays, directory or root)
    given = None if declared is None else declared.get(name)
    if rows is not None and given is not None and rows != given:
        raise bad_input(f"{root / GRAPH_FILE} gives node type {name!r} {given} nodes but "
                        f"the arrays in {directory} have {rows} rows")
    count = rows if rows is not None else given
    if count is None:
        raise bad_input(f"the node count of type {name!r} is unknown: add an array "
                        f"(nodes/{name}/x.npy) or give it in {root / GRAPH_FILE}")
    _check_train_mask(arrays)
    return NodeSet(int(count), arrays)


def _check_type_names(names: list[str], root: Path) -> None:
    folded: dict[str, str] = {}
    for name in names:
        problem = type_name_problem(name)
        if problem is not None:
            raise bad_input(f"{root}: node type {name[:80]!r} {problem}; type names become "
                            f"file names: rename it")
        other = folded.setdefault(name.casefold(), name)
        if other != name:
            raise bad_input(f"{root}: node types {other!r} and {name!r} differ only in case; "
                            f"their files would collide on case-insensitive file systems")


def _read_graph_file(path: Path) -> tuple[Optional[dict[str, int]],
                                          Optional[list[tuple[str, str, str]]]]:
    """``graph.json``: ``{"node_types": {TYPE: COUNT, ...}, "edge_types":
    [[SRC, REL, DST], ...]}``, both optional; order matters."""
    if not path.exists():
        return None, None
    if not path.is_file() or path.stat().st_size > MAX_GRAPH_FILE_BYTES:
        raise bad_input(f"{path} must be a regular file of at most {MAX_GRAPH_FILE_BYTES} "
                        f"bytes")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad_input(f"{path} is not JSON: {str(exc)[:200]}") from exc
    if not isinstance(value, dict) or set(value) - {"node_types", "edge_types"}:
        raise bad_input(f"{path} must be an object with keys node_types and edge_types only")
    nodes, edges = value.get("node_types"), value.get("edge_types")
    if nodes is not None and not (isinstance(nodes, dict) and all(
            isinstance(k, str) and type(v) is int and 0 <= v < (1 << 62)
            for k, v in nodes.items())):
        raise bad_input(f"{path}: node_types must map each type name to its node count "
                        f"(a non-negative integer)")
    if edges is not None and not (isinstance(edges, list) and all(
            isinstance(e, list) and len(e) == 3 and all(isinstance(s, str) for s in e)
            for e in edges)):
        raise bad_input(f"{path}: edge_types must be a list of [src, rel, dst] lists of "
                        f"type names")
    return nodes, None if edges is None else [tuple(e) for e in edges]


class EdgeStream:
    """What a streaming partitioner sees: the homogeneous view's node count,
    its edges in chunks (as many passes as it likes) and its training mask by
    windows. Across the ranks of a torchrun job
    (:mod:`~pyg_dist.partitioning.cross_host`), a plugin that sets
    ``assigns_across_ranks`` also sees its rank's share of the edges
    (:meth:`rank_chunks`) and an all-gather between the ranks
    (:meth:`exchange`), so that it needs no ``torch.distributed`` itself.

    Args:
        graph: The file graph.
        chunk_edges: Edges per chunk (sized from the memory limit).
        rank: This rank (0 on one host).
        world_size: Number of ranks (1 on one host).
        exchange: The all-gather of 1-D int64 arrays between the ranks
            (``None`` on one host).
    """

    def __init__(self, graph: FileGraph, chunk_edges: int, rank: int = 0, world_size: int = 1,
                 exchange: Optional[Callable[[np.ndarray], list[np.ndarray]]] = None) -> None:
        self._graph = graph
        self.chunk_edges = int(chunk_edges)
        self.rank, self.world_size = int(rank), int(world_size)
        self._exchange = exchange

    @property
    def num_nodes(self) -> int:
        """Number of nodes; ids are ``0 .. num_nodes - 1``."""
        return self._graph.num_nodes

    @property
    def num_edges(self) -> int:
        """Number of directed edges."""
        return self._graph.num_edges

    @property
    def node_type_counts(self) -> Optional[list[int]]:
        """Nodes of every node type, in view order (``None`` when homogeneous):
        view node ``i`` has the type whose range holds ``i``."""
        if not self._graph.is_hetero:
            return None
        return [n.num_nodes for n in self._graph.nodes.values()]

    @property
    def has_train_mask(self) -> bool:
        """Whether a ``train_mask`` exists."""
        return self._graph.has_train_mask()

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(src, dst)`` int64 arrays of :attr:`chunk_edges` edges (the last
        may be short), in view edge order; every call starts a new pass."""
        yield from self._graph.view_chunks(self.chunk_edges)

    def train_mask(self, start: int, stop: int) -> Optional[np.ndarray]:
        """``train_mask`` of nodes ``start:stop`` (``None`` without one)."""
        return self._graph.view_train_mask(start, stop) if self.has_train_mask else None

    def rank_chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """This rank's share of :meth:`chunks`: the chunks of the
        :attr:`rank`-th of :attr:`world_size` ranges of the parquet files
        (all of them on one host); every call starts a new pass."""
        yield from self._graph.view_chunks(self.chunk_edges, (self.rank, self.world_size))

    def exchange(self, values: np.ndarray) -> list[np.ndarray]:
        """Every rank's ``values`` (a 1-D int64 array, any length), in rank
        order: a collective, called by every rank as often and in the same
        order (on one host: ``[values]``)."""
        values = np.ascontiguousarray(values, dtype=np.int64).reshape(-1)
        if self._exchange is None:
            return [values]
        return self._exchange(values)


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

