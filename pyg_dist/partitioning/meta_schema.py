"""The schema of ``meta.json`` (format versions 1 and 2), checked field by field.

Version 1 is a homogeneous graph (one ``null`` node and edge type), version 2
a heterogeneous one (named types, whose names must pass
:func:`~pyg_dist.partitioning.format.type_name_problem`, and per-type
statistics).

:func:`validate_meta` checks every field's type and range and their
consistency: ``len(parts) == num_parts``, part ``k`` at index ``k``, per-part
counts summing to the totals of each type, one book per node type in the
dtype ``num_parts`` calls for, feature specs with known dtypes and bounded
shapes, every referenced file listed exactly once in ``files`` with a
well-formed sha256 and nothing else listed. The first bad field raises a
:class:`~pyg_dist.errors.PartitionFormatError` that names it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from pyg_dist.errors import PartitionFormatError
from pyg_dist.partitioning.dataset_dir import MAX_PARTS, book_dtype_name
from pyg_dist.partitioning.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    FORMAT_VERSIONS,
    HETERO_FORMAT_VERSION,
    RESERVED_EDGE_NAMES,
    RESERVED_NODE_NAMES,
    TORCH_DTYPES,
    edge_ends,
    safe_path,
    type_name_problem,
)

MAX_OPTIONS_DEPTH = 4
"""Deepest nesting inside ``partitioner.options`` (sent to clients in ``meta``)."""
MAX_COUNT = 1 << 62
"""Largest node or edge count accepted."""
MAX_NAME = 256
"""Longest type, feature, tensor key or file name."""
MAX_TYPES = 1024
"""Most node types, edge types or features of one type."""
MAX_FEATURE_NDIM = 7
"""Most dimensions of a feature besides the node (edge) dimension."""
MAX_FEATURE_DIM = 1 << 31
"""Largest size of one feature dimension."""

_STAT_INTS = ("num_nodes", "num_edges", "num_halo_nodes", "num_cut_edges", "num_train_nodes")
# Per-type counts of a part's entries in version 2, beside num_nodes / num_edges:
# they sum to the part's stats of the same name.
_PART_TYPE_INTS = {"node_types": ("num_halo_nodes", "num_train_nodes"),
                   "edge_types": ("num_cut_edges",)}
_HEX = frozenset("0123456789abcdef")
_FIX = "the dataset is damaged or was edited: partition it again"


def describe(value: Any) -> str:
    """A short description of a value read from a file, safe to put in an
    error message (never its ``repr``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value) if abs(value) < 10**18 else "an integer out of range"
    if isinstance(value, float):
        return f"the number {value:.6g}"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    return {list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


def json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    depth, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            level += 1
            depth = max(depth, level)
            stack.extend((v, level) for v in (item.values() if isinstance(item, dict)
                                              else item))
    return depth


def fail(path: Path, field: str, problem: str) -> PartitionFormatError:
    """The error for one bad field of ``meta.json``."""
    return PartitionFormatError(f"{path}: field {field}: {problem}; {_FIX}")


class _Checker:
    """Field accessors that raise :func:`fail` naming the field's path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hetero = False

    def obj(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise fail(self.path, field, f"must be an object, got {describe(value)}")
        return value

    def get(self, parent: dict[str, Any], key: str, where: str) -> Any:
        field = f"{where}.{key}" if where else key
        if key not in parent:
            raise fail(self.path, field, "is missing")
        return parent[key]

    def int_(self, parent: dict[str, Any], key: str, where: str, low: int = 0,
             high: int = MAX_COUNT) -> int:
        value = self.get(parent, key, where)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise fail(self.path, f"{where}.{key}".lstrip("."),
                       f"must be an integer in [{low}, {high}], got {describe(value)}")
        return value

    def num(self, parent: dict[str, Any], key: str, where: str) -> float:
        value = self.get(parent, key, where)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise fail(self.path, f"{where}.{key}".lstrip("."),
                       f"must be a finite number >= 0, got {describe(value)}")
        return value

    def str_(self, parent: dict[str, Any], key: str, where: str, *,
             optional: bool = False, max_len: int = MAX_NAME) -> Optional[str]:
        value = self.get(parent, key, where)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not 0 < len(value) <= max_len:
            raise fail(self.path, f"{where}.{key}".lstrip("."),
                       f"must be a string of 1 to {max_len} characters"
                       f"{' or null' if optional else ''}, got {describe(value)}")
        return value

    def list_(self, parent: dict[str, Any], key: str, where: str, low: int,
              high: int) -> list[Any]:
        value = self.get(parent, key, where)
        if not isinstance(value, list) or not low <= len(value) <= high:
            raise fail(self.path, f"{where}.{key}".lstrip("."),
                       f"must be an array of {low} to {high} entries, got {describe(value)}"
                       + (f" of {len(value)}" if isinstance(value, list) else ""))
        return value


def validate_meta(meta: Any, root: Path, path: Path) -> None:
    """Checks a parsed ``meta.json`` against the version-1 schema.

    Args:
        meta: The parsed JSON.
        root: The dataset directory (file names must stay inside it).
        path: ``meta.json``'s path, for messages.

    Raises:
        PartitionFormatError: naming the first bad field.
    """
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise PartitionFormatError(f"{path} is not a {FORMAT_NAME} meta.json")
    version = meta.get("format_version")
    if isinstance(version, bool) or version not in FORMAT_VERSIONS:
        raise PartitionFormatError(
            f"{path} has format version {describe(version)}; this pyg-dist reads versions "
            f"{' and '.join(map(str, FORMAT_VERSIONS))}. Partition the dataset again with "
            f"this version, or install the pyg-dist that wrote it")
    c = _Checker(path)
    c.hetero = version == HETERO_FORMAT_VERSION
    num_parts = c.int_(meta, "num_parts", "", 1, MAX_PARTS)
    num_nodes = c.int_(meta, "num_nodes", "", num_parts)
    num_edges = c.int_(meta, "num_edges", "")
    if not isinstance(c.get(meta, "is_hetero", ""), bool):
        raise fail(path, "is_hetero", f"must be true or false, got "
                                      f"{describe(meta['is_hetero'])}")
    if meta["is_hetero"] != c.hetero:
        raise fail(path, "is_hetero", f"disagrees with the format version (version "
                                      f"{FORMAT_VERSION} is homogeneous, version "
                                      f"{HETERO_FORMAT_VERSION} heterogeneous)")
    if "graph_name" in meta:
        c.str_(meta, "graph_name", "", optional=True, max_len=4096)
    node_types = _node_types(c, meta, num_nodes)
    edge_types = _edge_types(c, meta, node_types, num_edges)
    if meta["is_hetero"] != (None not in node_types):
        raise fail(path, "is_hetero", "disagrees with node_types (a null type is "
                                      "homogeneous, named types heterogeneous)")
    referenced = _books(c, meta, node_types, num_parts)
    referenced += _parts(c, meta, node_types, edge_types, num_parts)
    _stats(c, meta)
    _partitioner(c, meta)
    _files(c, meta, root, referenced)


def _type_key(c: _Checker, value: Any, field: str, edge: bool) -> Any:
    if value is None:
        return None
    if not edge and isinstance(value, str) and 0 < len(value) <= MAX_NAME:
        _name_ok(c, value, field)
        return value
    if edge and isinstance(value, list) and len(value) == 3 and all(
            isinstance(v, str) and 0 < len(v) <= MAX_NAME for v in value):
        for name in value:
            _name_ok(c, name, field)
        return tuple(value)
    kind = "a [src, rel, dst] triple of names" if edge else "a type name"
    raise fail(c.path, field, f"must be null or {kind}, got {describe(value)}")


def _name_ok(c: _Checker, name: str, field: str) -> None:
    """Type names become file names: the writer refuses bad ones, so a bad
    one in a file was not written by pyg-dist."""
    problem = type_name_problem(name)
    if problem is not None:
        raise fail(c.path, field, f"holds a type name that {problem}")


def _features(c: _Checker, entry: dict[str, Any], where: str,
              reserved: frozenset[str]) -> None:
    features = c.obj(c.get(entry, "features", where), f"{where}.features")
    if len(features) > MAX_TYPES:
        raise fail(c.path, f"{where}.features", f"lists {len(features)} features, more "
                                                f"than {MAX_TYPES}")
    for name, spec in features.items():
        if not 0 < len(name) <= MAX_NAME or name in reserved:
            raise fail(c.path, f"{where}.features", "holds an empty, too long or reserved "
                                                    "feature name")
        field = f"{where}.features[{name}]"
        spec = c.obj(spec, field)
        if c.get(spec, "dtype", field) not in TORCH_DTYPES:
            raise fail(c.path, f"{field}.dtype", f"must be one of {sorted(TORCH_DTYPES)}, "
                                                 f"got {describe(spec['dtype'])}")
        shape = c.list_(spec, "shape", field, 0, MAX_FEATURE_NDIM)
        for size in shape:
            if isinstance(size, bool) or not isinstance(size, int) \
                    or not 0 <= size <= MAX_FEATURE_DIM:
                raise fail(c.path, f"{field}.shape", f"sizes must be integers in "
                                                     f"[0, {MAX_FEATURE_DIM}], got "
                                                     f"{describe(size)}")


def _type_entries(c: _Checker, meta: dict[str, Any], field: str, edge: bool
                  ) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """``(where, entry, type key)`` of every entry of ``meta[field]``, each
    a map whose type is well-formed and named once."""
    seen: set[Any] = set()
    for i, entry in enumerate(c.list_(meta, field, "", 1, MAX_TYPES)):
        where = f"{field}[{i}]"
        entry = c.obj(entry, where)
        key = _type_key(c, c.get(entry, "type", where), f"{where}.type", edge=edge)
        if key in seen:
            raise fail(c.path, f"{where}.type", f"repeats {'an edge' if edge else 'a node'} "
                                                f"type")
        seen.add(key)
        yield where, entry, key


def _node_types(c: _Checker, meta: dict[str, Any], num_nodes: int) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for where, entry, key in _type_entries(c, meta, "node_types", edge=False):
        counts[key] = c.int_(entry, "num_nodes", where)
        _features(c, entry, where, RESERVED_NODE_NAMES)
        if c.hetero:
            c.num(entry, "balance", where)
    if None in counts and len(counts) > 1:
        raise fail(c.path, "node_types", "mixes the null (homogeneous) type with named ones")
    if sum(counts.values()) != num_nodes:
        raise fail(c.path, "node_types", f"counts sum to {sum(counts.values())}, num_nodes "
                                         f"says {num_nodes}")
    return counts


def _edge_types(c: _Checker, meta: dict[str, Any], node_types: dict[Any, int],
                num_edges: int) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for where, entry, key in _type_entries(c, meta, "edge_types", edge=True):
        for end, value in zip(("src", "dst"), edge_ends(key)):
            if c.get(entry, end, where) != value or value not in node_types:
                raise fail(c.path, f"{where}.{end}", "must name the node type at that end "
                                                     "of the edge type (null if homogeneous)")
        counts[key] = c.int_(entry, "num_edges", where)
        _features(c, entry, where, RESERVED_EDGE_NAMES)
        if c.hetero:
            c.int_(entry, "edge_cut", where, 0, counts[key])
            c.num(entry, "balance", where)
    if (None in counts) != (None in node_types) or (None in counts and len(counts) > 1):
        raise fail(c.path, "edge_types", "a homogeneous graph has exactly one edge type, "
                                         "null; a heterogeneous one only named types")
    if sum(counts.values()) != num_edges:
        raise fail(c.path, "edge_types", f"counts sum to {sum(counts.values())}, num_edges "
                                         f"says {num_edges}")
    return counts


def _books(c: _Checker, meta: dict[str, Any], node_types: dict[Any, int],
           num_parts: int) -> list[tuple[str, str]]:
    books = c.list_(meta, "books", "", len(node_types), len(node_types))
    expected = book_dtype_name(num_parts)
    seen, files = set(), []
    for i, entry in enumerate(books):
        where = f"books[{i}]"
        entry = c.obj(entry, where)
        key = _type_key(c, c.get(entry, "type", where), f"{where}.type", edge=False)
        if key not in node_types or key in seen:
            raise fail(c.path, f"{where}.type", "must name each node type exactly once")
        seen.add(key)
        c.str_(entry, "key", where)
        if c.get(entry, "dtype", where) != expected:
            raise fail(c.path, f"{where}.dtype", f"must be {expected} for {num_parts} parts, "
                                                 f"got {describe(entry['dtype'])}")
        files.append((c.str_(entry, "file", where), f"{where}.file"))
    return files


def _parts(c: _Checker, meta: dict[str, Any], node_types: dict[Any, int],
           edge_types: dict[Any, int], num_parts: int) -> list[tuple[str, str]]:
    parts = c.list_(meta, "parts", "", num_parts, num_parts)
    totals: dict[tuple[str, Any], int] = {}
    files = []
    for k, entry in enumerate(parts):
        where = f"parts[{k}]"
        entry = c.obj(entry, where)
        if c.int_(entry, "part", where, 0, MAX_PARTS) != k:
            raise fail(c.path, f"{where}.part", f"must be {k}: parts are listed in order")
        sums = {}
        for kind, types, count in (("node_types", node_types, "num_nodes"),
                                   ("edge_types", edge_types, "num_edges")):
            listed = c.list_(entry, kind, where, len(types), len(types))
            seen = set()
            for i, item in enumerate(listed):
                field = f"{where}.{kind}[{i}]"
                item = c.obj(item, field)
                key = _type_key(c, c.get(item, "type", field), f"{field}.type",
                                edge=kind == "edge_types")
                if key not in types or key in seen:
                    raise fail(c.path, f"{field}.type", f"must name each of the graph's "
                                                        f"{kind.replace('_', ' ')} once")
                seen.add(key)
                n = c.int_(item, count, field)
                totals[(kind, key)] = totals.get((kind, key), 0) + n
                sums[count] = sums.get(count, 0) + n
                for name in _PART_TYPE_INTS[kind] if c.hetero else ():
                    sums[name] = sums.get(name, 0) + c.int_(item, name, field)
                files.append((c.str_(item, "file", field), f"{field}.file"))
        stats = c.obj(c.get(entry, "stats", where), f"{where}.stats")
        for name in _STAT_INTS:
            c.int_(stats, name, f"{where}.stats")
        for name, total in sums.items():
            if stats[name] != total:
                raise fail(c.path, f"{where}.stats.{name}", f"is {stats[name]}, the part's "
                                                            f"files hold {total}")
    for (kind, key), total in totals.items():
        declared = (node_types if kind == "node_types" else edge_types)[key]
        if total != declared:
            raise fail(c.path, kind, f"the parts hold {total} of type "
                                     f"{'null' if key is None else 'named'} "
                                     f"{'' if key is None else key}, the graph {declared}")
    return files


def _stats(c: _Checker, meta: dict[str, Any]) -> None:
    stats = c.obj(c.get(meta, "stats", ""), "stats")
    for name in ("edge_cut", "total_halo_nodes"):
        c.int_(stats, name, "stats")
    for name in ("edge_cut_fraction", "node_balance", "edge_balance"):
        c.num(stats, name, "stats")


def _partitioner(c: _Checker, meta: dict[str, Any]) -> None:
    if "partitioner" not in meta:
        return
    entry = c.obj(meta["partitioner"], "partitioner")
    c.str_(entry, "name", "partitioner", optional=True)
    if "distribution" in entry:
        c.str_(entry, "distribution", "partitioner", optional=True, max_len=1024)
    options = c.obj(c.get(entry, "options", "partitioner"), "partitioner.options")
    if json_depth(options) > MAX_OPTIONS_DEPTH:
        raise fail(c.path, "partitioner.options", f"nests deeper than {MAX_OPTIONS_DEPTH} "
                                                  f"levels")


def _files(c: _Checker, meta: dict[str, Any], root: Path,
           referenced: list[tuple[str, str]]) -> None:
    files = c.obj(c.get(meta, "files", ""), "files")
    names: dict[str, str] = {}
    for name, field in referenced:
        safe_path(root, name)
        if name in names:
            raise fail(c.path, field, f"names the same file as {names[name]}: every file "
                                      f"belongs to one entry")
        names[name] = field
        if name not in files:
            raise fail(c.path, field, "names a file that 'files' lists no checksum for")
    extra = len(set(files) - set(names))
    if extra:
        raise fail(c.path, "files", f"lists {extra} file(s) no entry refers to")
    for name, entry in files.items():
        where = f"files[{name}]"
        entry = c.obj(entry, where)
        digest = c.get(entry, "sha256", where)
        if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
            raise fail(c.path, f"{where}.sha256", f"must be 64 lowercase hex digits, got "
                                                  f"{describe(digest)}")
        c.int_(entry, "bytes", where)
