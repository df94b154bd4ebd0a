"""Reading a partitioned dataset: :class:`PartitionReader` and :class:`PartData`.

The reader validates ``meta.json`` whole when it opens
(:mod:`pyg_dist.partitioning.meta`) and checks every file's header against it
(:mod:`pyg_dist.partitioning.consistency`); it checks each file's sha256 the
first time it loads it (``verify=True``) and the loaded tensors and their ids
every time. Anything wrong is a :class:`~pyg_dist.errors.PartitionFormatError`
naming the file and field. Parts load copied into RAM or memory-mapped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional, Union

from pyg_dist.errors import (
    ChecksumMismatchError,
    GraphKindMismatchError,
    InvalidPartitionArgumentError,
    PartitionFormatError,
)
from pyg_dist.partitioning import consistency, type_keys
from pyg_dist.partitioning.book import PartitionBook
from pyg_dist.partitioning.format import (
    EDGE_IDS,
    INDICES,
    INDPTR,
    NODE_IDS,
    EdgeTypeKey,
    NodeTypeKey,
    checked_file,
    edge_ends,
    load_tensors,
    safe_path,
    sha256_file,
    type_from_json,
)
from pyg_dist.partitioning.hetero_book import HeteroPartitionBook
from pyg_dist.partitioning.meta import read_meta
from pyg_dist.partitioning.parts import EdgePart, NodePart, PartData

logger = logging.getLogger(__name__)


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
    def graph_id(self) -> dict[str, Any]:
        """What tells this partitioned graph from another: its name and the
        sha256 of its files' checksums in ``meta.json`` (a server's
        ``meta`` answers it as ``graph``; a trainer that maps a same-host
        part checks it against its server's)."""
        files = json.dumps(self.meta["files"], sort_keys=True).encode()
        return {"name": self.meta.get("graph_name"),
                "files_sha256": hashlib.sha256(files).hexdigest()}

    @property
    def num_parts(self) -> int:
        """Number of parts."""
        return int(self.meta["num_parts"])

    @property
    def num_nodes(self) -> int:
        """Number of nodes of the whole graph (all node types together)."""
        return int(self.meta["num_nodes"])

    @property
    def num_edges(self) -> int:
        """Number of directed edges of the whole graph (all edge types together)."""
        return int(self.meta["num_edges"])

    @property
    def is_hetero(self) -> bool:
        """Whether the dataset is a heterogeneous graph (format version 2)."""
        return bool(self.meta["is_hetero"])

    @property
    def node_types(self) -> list[NodeTypeKey]:
        """Node types (``[None]`` for a homogeneous graph)."""
        return [type_from_json(t["type"]) for t in self.meta["node_types"]]

    @property
    def edge_types(self) -> list[EdgeTypeKey]:
        """Edge types (``[None]`` for a homogeneous graph)."""
        return [type_from_json(t["type"]) for t in self.meta["edge_types"]]

    def node_type_key(self, node_type: Any) -> NodeTypeKey:
        """Checks a node type against the dataset and returns its key.

        Raises:
            GraphKindMismatchError: a named type on a homogeneous dataset, or
                ``None`` on a heterogeneous one.
            UnknownTypeError: a name the dataset does not have.
        """
        return type_keys.node_type_key(node_type, self.node_types, str(self.root))

    def edge_type_key(self, edge_type: Any) -> EdgeTypeKey:
        """Checks an edge type and returns its ``(src, rel, dst)`` key; as in
        PyG, a relation name alone names the one edge type that has it.

        Raises:
            GraphKindMismatchError: a named type on a homogeneous dataset, or
                ``None`` on a heterogeneous one.
            UnknownTypeError: a type the dataset does not have, or a relation
                name shared by several edge types.
        """
        return type_keys.edge_type_key(edge_type, self.edge_types, str(self.root))

    def num_nodes_of(self, node_type: Any) -> int:
        """Number of nodes of one node type."""
        key = self.node_type_key(node_type)
        return int(consistency.by_type(self.meta["node_types"])[key]["num_nodes"])

    def num_edges_of(self, edge_type: Any) -> int:
        """Number of edges of one edge type."""
        key = self.edge_type_key(edge_type)
        return int(consistency.by_type(self.meta["edge_types"])[key]["num_edges"])

    def node_feature_specs(self, node_type: NodeTypeKey = None) -> dict[str, dict[str, Any]]:
        """``{name: {"dtype": "float32", "shape": [...]}}`` of a node type's
        features; ``shape`` excludes the node dimension."""
        key = self.node_type_key(node_type)
        return consistency.by_type(self.meta["node_types"])[key]["features"]

    def edge_feature_specs(self, edge_type: EdgeTypeKey = None) -> dict[str, dict[str, Any]]:
        """``{name: {"dtype", "shape"}}`` of an edge type's features."""
        key = self.edge_type_key(edge_type)
        return consistency.by_type(self.meta["edge_types"])[key]["features"]

    @property
    def book(self) -> PartitionBook:
        """The partition book of a homogeneous graph, loaded once.

        Raises:
            GraphKindMismatchError: on a heterogeneous graph (use
                :attr:`hetero_book`).
        """
        if self.is_hetero:
            raise GraphKindMismatchError(
                f"{self.root} holds a heterogeneous graph; its books are per node type: "
                f"use reader.hetero_book or reader.book_of(node_type)")
        return self.book_of(None)

    @property
    def hetero_book(self) -> HeteroPartitionBook:
        """The per-node-type partition books of a heterogeneous graph.

        Raises:
            GraphKindMismatchError: on a homogeneous graph (use :attr:`book`).
        """
        if not self.is_hetero:
            raise GraphKindMismatchError(
                f"{self.root} holds a homogeneous graph; use reader.book")
        return HeteroPartitionBook({t: self.book_of(t) for t in self.node_types},
                                   self.num_parts)

    def book_of(self, node_type: NodeTypeKey) -> PartitionBook:
        """The partition book of a node type, loaded and checked once.

        Raises:
            GraphKindMismatchError, UnknownTypeError: see :meth:`node_type_key`.
            PartitionFormatError: if a part id is out of range or a part owns
                another number of nodes than ``meta.json`` says.
        """
        node_type = self.node_type_key(node_type)
        book = self._books.get(node_type)
        if book is None:
            entry = consistency.by_type(self.meta["books"])[node_type]
            path = self._checked(entry["file"])
            tensor = load_tensors(path, [entry["key"]])[entry["key"]]
            counts = [consistency.by_type(part["node_types"])[node_type]["num_nodes"]
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

    def _check_part(self, part: Any) -> int:
        if isinstance(part, bool) or not isinstance(part, int) \
                or not 0 <= part < self.num_parts:
            raise InvalidPartitionArgumentError(
                f"part must lie in [0, {self.num_parts}) for {self.root}; got {part!r}")
        return part

    def _loadable(self, part: Any) -> int:
        """``part``, checked in range and among the parts this reader was opened for."""
        part = self._check_part(part)
        if self.parts is not None and part not in self.parts:
            raise InvalidPartitionArgumentError(
                f"this reader of {self.root} was opened for parts {sorted(self.parts)}, "
                f"not part {part}; open PartitionReader(root, parts=[...]) with it")
        return part

    def load_nodes(self, node_type: NodeTypeKey, part: int, *, mmap: bool = False,
                   features: bool = True) -> NodePart:
        """Loads the nodes of one node type owned by one part.

        Args:
            node_type: The node type (``None`` for a homogeneous graph).
            part: Index in ``[0, num_parts)``.
            mmap: Memory-map the tensors instead of reading them into RAM.
            features: Load the features too (``node_ids`` always load).

        Raises:
            InvalidPartitionArgumentError: if ``part`` is out of range.
            GraphKindMismatchError, UnknownTypeError: see :meth:`node_type_key`.
            ChecksumMismatchError: if the file changed since it was written.
            PartitionFormatError: if the file is missing or malformed.
        """
        part = self._loadable(part)
        node_type = self.node_type_key(node_type)
        entry = consistency.by_type(self.meta["parts"][part]["node_types"])[node_type]
        path = self._checked(entry["file"])
        tensors = load_tensors(path, None if features else [NODE_IDS], mmap_=mmap)
        consistency.check_loaded(
            path, tensors, consistency.expected_node_file(self.meta, part, node_type))
        ids = tensors.pop(NODE_IDS)
        consistency.check_node_part(path, ids, self.num_nodes_of(node_type), part,
                                    self.book_of(node_type))
        return NodePart(ids, tensors)

    def load_edges(self, edge_type: EdgeTypeKey, part: int, *, mmap: bool = False,
                   features: bool = True) -> EdgePart:
        """Loads the CSC of one edge type stored in one part (the incoming
        edges of the part's destination nodes of that type).

        Args:
            edge_type: ``(src, rel, dst)`` or a unique relation name
                (``None`` for a homogeneous graph).
            part: Index in ``[0, num_parts)``.
            mmap: Memory-map the tensors instead of reading them into RAM.
            features: Load the edge features too.

        Raises:
            InvalidPartitionArgumentError: if ``part`` is out of range.
            GraphKindMismatchError, UnknownTypeError: see :meth:`edge_type_key`.
            ChecksumMismatchError: if the file changed since it was written.
            PartitionFormatError: if the file is missing or malformed.
        """
        part = self._loadable(part)
        edge_type = self.edge_type_key(edge_type)
        entry = consistency.by_type(self.meta["parts"][part]["edge_types"])[edge_type]
        path = self._checked(entry["file"])
        names = None if features else [INDPTR, INDICES, EDGE_IDS]
        tensors = load_tensors(path, names, mmap_=mmap)
        consistency.check_loaded(
            path, tensors, consistency.expected_edge_file(self.meta, part, edge_type))
        consistency.check_edge_part(path, tensors, self.num_nodes_of(edge_ends(edge_type)[0]),
                                    self.num_edges_of(edge_type))
        return EdgePart(tensors.pop(INDPTR), tensors.pop(INDICES), tensors.pop(EDGE_IDS),
                        tensors)

    def load_part(self, part: int, mmap: bool = False, *, topology: bool = True,
                  features: bool = True) -> PartData:
        """Loads one part, every node and edge type.

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
        part = self._loadable(part)
        nodes = {t: self.load_nodes(t, part, mmap=mmap, features=features)
                 for t in self.node_types}
        edges = {t: self.load_edges(t, part, mmap=mmap, features=features)
                 for t in (self.edge_types if topology else [])}
        return PartData(part, self.num_parts, nodes, edges)


