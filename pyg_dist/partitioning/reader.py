"""Reading a partitioned dataset: :class:`PartitionReader` and :class:`PartData`.

The reader validates ``meta.json`` whole when it opens
(:mod:`pyg_dist.partitioning.meta`) and checks every file's header against it
(:mod:`pyg_dist.partitioning.consistency`); it checks each file's sha256 the
first time it loads it (``verify=True``) and the loaded tensors and their ids
every time. Anything wrong is a :class:`~pyg_dist.errors.PartitionFormatError`
naming the file and field. Parts load copied into RAM or memory-mapped.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from torch import Tensor

from pyg_dist.errors import (
    ChecksumMismatchError,
    InvalidPartitionArgumentError,
    PartitionFormatError,
)
from pyg_dist.partitioning import consistency
from pyg_dist.partitioning.book import PartitionBook
from pyg_dist.partitioning.format import (
    EDGE_IDS,
    INDICES,
    INDPTR,
    NODE_IDS,
    EdgeTypeKey,
    NodeTypeKey,
    checked_file,
    load_tensors,
    read_header,
    safe_path,
    sha256_file,
    type_from_json,
)
from pyg_dist.partitioning.meta import read_meta

logger = logging.getLogger(__name__)


@dataclass
class NodePart:
    """The owned nodes of one node type in one part.

    Args:
        node_ids: Sorted global ids (int64); row ``i`` of every feature
            belongs to ``node_ids[i]`` (its *local row*).
        features: Feature name -> tensor in local row order (``x``, ``y``, masks).
    """

    node_ids: Tensor
    features: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class EdgePart:
    """The incoming edges of one part's owned destination nodes, as CSC.

    Args:
        indptr: ``[num_owned + 1]``; edges of local destination ``i`` are
            ``indptr[i]:indptr[i + 1]``.
        indices: Global source id of every edge (int64).
        edge_ids: Global edge id (column of the input ``edge_index``) of every edge.
        features: Edge feature name -> tensor in CSC order.
    """

    indptr: Tensor
    indices: Tensor
    edge_ids: Tensor
    features: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class PartData:
    """Everything one part holds, keyed by node / edge type (``None`` for a
    homogeneous graph). The properties give the homogeneous view directly.

    Args:
        part: The part's index.
        num_parts: Number of parts of the dataset.
        nodes: Node type -> :class:`NodePart`.
        edges: Edge type -> :class:`EdgePart` (empty if topology was not loaded).
    """

    part: int
    num_parts: int
    nodes: dict[NodeTypeKey, NodePart]
    edges: dict[EdgeTypeKey, EdgePart]

    def _only(self, table: dict, what: str) -> Any:
        if None not in table:
            raise PartitionFormatError(
                f"part {self.part} has no homogeneous {what}; index .nodes/.edges by type")
        return table[None]

    @property
    def node_ids(self) -> Tensor:
        """Sorted owned global ids (homogeneous graph)."""
        return self._only(self.nodes, "nodes").node_ids

    @property
    def node_features(self) -> dict[str, Tensor]:
        """Node features in local row order (homogeneous graph)."""
        return self._only(self.nodes, "nodes").features

    @property
    def indptr(self) -> Tensor:
        """CSC pointer over owned destinations (homogeneous graph)."""
        return self._only(self.edges, "edges").indptr

    @property
    def indices(self) -> Tensor:
        """Global source ids of the owned nodes' incoming edges (homogeneous graph)."""
        return self._only(self.edges, "edges").indices

    @property
    def edge_ids(self) -> Tensor:
        """Global edge ids, aligned with :attr:`indices` (homogeneous graph)."""
        return self._only(self.edges, "edges").edge_ids

    @property
    def edge_features(self) -> dict[str, Tensor]:
        """Edge features in CSC order (homogeneous graph)."""
        return self._only(self.edges, "edges").features

    @property
    def num_nodes(self) -> int:
        """Owned nodes over all node types."""
        return sum(int(n.node_ids.numel()) for n in self.nodes.values())

    @property
    def num_edges(self) -> int:
        """Stored edges over all edge types."""
        return sum(int(e.indices.numel()) for e in self.edges.values())


class PartitionReader:
    """Opens a partitioned dataset written by :func:`pyg_dist.partition`.

    Args:
        root: The dataset directory (holding ``meta.json``).
        verify: Check each file's sha256 against ``meta.json`` before its
            first load (default). Skip only for trusted, very large datasets.
        parts: The parts this reader may load; only their files (and
            ``meta.json`` and the books) need to exist under ``root``, which
            is all a server host needs. ``None`` (default): every part.

    Raises:
        PartitionFormatError: if ``meta.json`` is missing, malformed, of
            another format or version, inconsistent, names files outside
            ``root`` or through symbolic links, or a file's header disagrees
            with it (the message names the file and field).
        InvalidPartitionArgumentError: if a part in ``parts`` is out of range.
    """

    def __init__(self, root: Union[str, os.PathLike], verify: bool = True,
                 parts: Optional[Iterable[int]] = None) -> None:
        self.root = Path(root)
        self.verify = verify
        self.meta = read_meta(self.root)
        self.parts: Optional[frozenset[int]] = None
        if parts is not None:
            self.parts = frozenset(self._check_part(k) for k in parts)
        consistency.check_headers(self.meta, self._file, self.parts)
        self._verified: set[str] = set()
        self._lock = threading.Lock()
        self._books: dict[NodeTypeKey, PartitionBook] = {}

    @property
    def num_parts(self) -> int:
        """Number of parts."""
        return int(self.meta["num_parts"])

    @property
    def num_nodes(self) -> int:
        """Number of nodes of the whole graph."""
        return int(self.meta["num_nodes"])

    @property
    def num_edges(self) -> int:
        """Number of directed edges of the whole graph."""
        return int(self.meta["num_edges"])

    @property
    def node_types(self) -> list[NodeTypeKey]:
        """Node types (``[None]`` for a homogeneous graph)."""
        return [type_from_json(t["type"]) for t in self.meta["node_types"]]

    @property
    def edge_types(self) -> list[EdgeTypeKey]:
        """Edge types (``[None]`` for a homogeneous graph)."""
        return [type_from_json(t["type"]) for t in self.meta["edge_types"]]

    def node_feature_specs(self, node_type: NodeTypeKey = None) -> dict[str, dict[str, Any]]:
        """``{name: {"dtype": "float32", "shape": [...]}}`` of a node type's
        features; ``shape`` excludes the node dimension."""
        for entry in self.meta["node_types"]:
            if type_from_json(entry["type"]) == node_type:
                return entry["features"]
        raise InvalidPartitionArgumentError(f"no node type {node_type!r}; "
                                            f"the dataset has {self.node_types}")

    @property
    def book(self) -> PartitionBook:
        """The partition book (homogeneous graph: the first listed), loaded once."""
        return self.book_of(type_from_json(self.meta["books"][0]["type"]))

    def book_of(self, node_type: NodeTypeKey) -> PartitionBook:
        """The partition book of a node type, loaded and checked once.

        Raises:
            PartitionFormatError: if a part id is out of range or a part owns
                another number of nodes than ``meta.json`` says.
        """
        book = self._books.get(node_type)
        if book is None:
            entry = next(b for b in self.meta["books"]
                         if type_from_json(b["type"]) == node_type)
            path = self._checked(entry["file"])
            tensor = load_tensors(path, [entry["key"]])[entry["key"]]
            counts = [next(t["num_nodes"] for t in part["node_types"]
                           if type_from_json(t["type"]) == node_type)
                      for part in self.meta["parts"]]
            book = consistency.check_book(path, tensor, self.num_parts, counts)
            self._books[node_type] = book
        return book

    def path(self, name: str) -> Path:
        """The absolute path of a file named in ``meta.json``."""
        return safe_path(self.root, name)

    def _file(self, name: str) -> Path:
        return checked_file(self.root, name)

    def _checked(self, name: str) -> Path:
        path = self._file(name)
        if self.verify:
            with self._lock:
                if name not in self._verified:
                    expected = self.meta["files"].get(name, {}).get("sha256")
                    if expected is None:
                        raise PartitionFormatError(f"meta.json has no checksum for {name}")
                    actual = sha256_file(path)
                    if actual != expected:
                        raise ChecksumMismatchError(str(path), expected, actual)
                    self._verified.add(name)
        return path

    def verify_all(self) -> None:
        """Checks the sha256 of every file listed in ``meta.json``.

        With ``parts`` given to the reader, the other parts' files are skipped.

        Raises:
            ChecksumMismatchError: on the first file whose content changed.
        """
        skipped = {item["file"] for k, entry in enumerate(self.meta["parts"])
                   if self.parts is not None and k not in self.parts
                   for item in entry["node_types"] + entry["edge_types"]}
        for name in self.meta["files"]:
            if name in skipped:
                continue
            verify, self.verify = self.verify, True
            try:
                self._checked(name)
            finally:
                self.verify = verify

    def load_part(self, part: int, mmap: bool = False, *, topology: bool = True,
                  features: bool = True) -> PartData:
        """Loads one part.

        Args:
            part: Index in ``[0, num_parts)``.
            mmap: Memory-map the tensors from the safetensors files instead of
                reading them into RAM.
            topology: Load the CSC of the incoming edges.
            features: Load node and edge features (``node_ids`` always load).

        Raises:
            InvalidPartitionArgumentError: if ``part`` is out of range.
            ChecksumMismatchError: if a file changed since it was written.
            PartitionFormatError: if a file is missing or malformed.
        """
        self._check_part(part)
        if self.parts is not None and part not in self.parts:
            raise InvalidPartitionArgumentError(
                f"this reader of {self.root} was opened for parts {sorted(self.parts)}, "
                f"not part {part}; open PartitionReader(root, parts=[...]) with it")
        entry = self.meta["parts"][part]
        node_counts = {type_from_json(t["type"]): t["num_nodes"]
                       for t in self.meta["node_types"]}
        nodes = {}
        for node_entry in entry["node_types"]:
            node_type = type_from_json(node_entry["type"])
            path = self._checked(node_entry["file"])
            names = None if features else [NODE_IDS]
            tensors = load_tensors(path, names, mmap_=mmap)
            consistency.check_loaded(
                path, tensors, consistency.expected_node_file(self.meta, part, node_type))
            ids = tensors.pop(NODE_IDS)
            consistency.check_node_part(path, ids, node_counts[node_type], part,
                                        self.book_of(node_type))
            nodes[node_type] = NodePart(ids, tensors)
        edge_counts = {type_from_json(t["type"]): t["num_edges"]
                       for t in self.meta["edge_types"]}
        edges = {}
        for edge_entry in entry["edge_types"] if topology else []:
            edge_type = type_from_json(edge_entry["type"])
            path = self._checked(edge_entry["file"])
            names = None if features else [INDPTR, INDICES, EDGE_IDS]
            tensors = load_tensors(path, names, mmap_=mmap)
            consistency.check_loaded(
                path, tensors, consistency.expected_edge_file(self.meta, part, edge_type))
            src = None if edge_type is None else edge_type[0]
            consistency.check_edge_part(path, tensors, node_counts[src],
                                        edge_counts[edge_type])
            edges[edge_type] = EdgePart(tensors.pop(INDPTR), tensors.pop(INDICES),
                                        tensors.pop(EDGE_IDS), tensors)
        return PartData(part, self.num_parts, nodes, edges)

    def _check_part(self, part: Any) -> int:
        if isinstance(part, bool) or not isinstance(part, int) \
                or not 0 <= part < self.num_parts:
            raise InvalidPartitionArgumentError(
                f"part must lie in [0, {self.num_parts}) for {self.root}; got {part!r}")
        return part

    def tensor_names(self, part: int) -> list[str]:
        """Names of the tensors in a part's node file (header only)."""
        header, _ = read_header(self._file(self.meta["parts"][part]["node_types"][0]["file"]))
        return sorted(header)
