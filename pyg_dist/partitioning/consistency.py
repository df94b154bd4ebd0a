"""Checking the tensor files against a validated ``meta.json``.

Two moments, two costs:

* **On open** (:func:`check_headers`): every file ``meta.json`` names is a
  regular file inside ROOT whose safetensors header holds exactly the tensors
  ``meta.json`` promises, in its dtypes and shapes. The server sizes replies
  from ``meta.json``'s feature specs; this is what makes those specs true of
  the tensors it will serve. Costs one header read per file.
* **On load** (:func:`check_node_part`, :func:`check_edge_part`,
  :func:`check_book`): the loaded tensors again (a file may change between
  open and load, and ``verify=False`` skips checksums), and the id values:
  owned node ids sorted, unique, inside ``[0, num_nodes)`` and owned by the
  part according to the book (so no node is owned twice across parts), CSC
  pointers monotonic, source and edge ids in range, edge ids distinct within
  the part. A negative id is refused
  here, never wrapped around by an index. Costs one pass over the ids.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError, PartitionFormatError
from pyg_dist.kernels.distinct import all_distinct
from pyg_dist.partitioning.book import PartitionBook, book_dtype
from pyg_dist.partitioning.format import (
    EDGE_IDS,
    INDICES,
    INDPTR,
    NODE_IDS,
    SAFETENSORS_DTYPES,
    TORCH_DTYPES,
    edge_ends,
    read_header,
    type_from_json,
)

Expected = dict[str, tuple[torch.dtype, list[int]]]

_FIX = "the dataset is damaged or was edited: partition it again"


def _bad(path: Path, what: str) -> PartitionFormatError:
    return PartitionFormatError(f"{path}: {what}; {_FIX}")


def by_type(entries: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """``meta.json`` entries (of node types, edge types, books; a part's) by
    their type's key (``None``, a name or a ``(src, rel, dst)`` tuple)."""
    return {type_from_json(t["type"]): t for t in entries}


def _part_counts(entry: dict[str, Any], kind: str, count: str) -> dict[Any, int]:
    return {key: t[count] for key, t in by_type(entry[kind]).items()}


def _with_features(expected: Expected, features: dict[str, Any], rows: int) -> Expected:
    for name, spec in features.items():
        expected[name] = (TORCH_DTYPES[spec["dtype"]], [rows, *spec["shape"]])
    return expected


def expected_node_file(meta: dict[str, Any], part: int, node_type: Any) -> Expected:
    """Tensor name -> (dtype, shape) of a part's node file of ``node_type``."""
    rows = _part_counts(meta["parts"][part], "node_types", "num_nodes")[node_type]
    return _with_features({NODE_IDS: (torch.int64, [rows])},
                          by_type(meta["node_types"])[node_type]["features"], rows)


def expected_edge_file(meta: dict[str, Any], part: int, edge_type: Any) -> Expected:
    """Tensor name -> (dtype, shape) of a part's edge file of ``edge_type``."""
    entry = meta["parts"][part]
    edges = _part_counts(entry, "edge_types", "num_edges")[edge_type]
    dst = _part_counts(entry, "node_types", "num_nodes")[edge_ends(edge_type)[1]]
    return _with_features({INDPTR: (torch.int64, [dst + 1]), INDICES: (torch.int64, [edges]),
                           EDGE_IDS: (torch.int64, [edges])},
                          by_type(meta["edge_types"])[edge_type]["features"], edges)


def check_headers(meta: dict[str, Any], file: Callable[[str], Path],
                  parts: Optional[Collection[int]] = None) -> None:
    """Checks the header of every file ``meta.json`` names (see the module doc).

    Args:
        meta: A validated ``meta.json``.
        file: Name -> checked path (refuses links and escapes).
        parts: Check only these parts' files (and the books); ``None``: all.
            A server host holds only the parts it serves.

    Raises:
        PartitionFormatError: naming the file and the tensor that differs.
    """
    node_counts = {k: t["num_nodes"] for k, t in by_type(meta["node_types"]).items()}
    dtype = book_dtype(meta["num_parts"])
    for book in meta["books"]:
        key = type_from_json(book["type"])
        _check_header(file(book["file"]), {book["key"]: (dtype, [node_counts[key]])})
    for k, entry in enumerate(meta["parts"]):
        if parts is not None and k not in parts:
            continue
        for item in entry["node_types"]:
            _check_header(file(item["file"]),
                          expected_node_file(meta, k, type_from_json(item["type"])))
        for item in entry["edge_types"]:
            _check_header(file(item["file"]),
                          expected_edge_file(meta, k, type_from_json(item["type"])))


def _check_header(path: Path, expected: Expected) -> None:
    header, _ = read_header(path)
    missing = sorted(set(expected) - set(header))
    extra = len(set(header) - set(expected))
    if missing or extra:
        raise _bad(path, f"holds {extra} tensor(s) meta.json does not list"
                   if not missing else f"lacks the tensors {missing} meta.json lists")
    for name, (dtype, shape) in expected.items():
        info = header[name]
        if info["dtype"] != SAFETENSORS_DTYPES[dtype] or info["shape"] != shape:
            raise _bad(path, f"tensor {name!r} is {info['dtype']} of shape {info['shape']}, "
                             f"meta.json says {SAFETENSORS_DTYPES[dtype]} of shape {shape}")


def check_loaded(path: Path, tensors: dict[str, Tensor], expected: Expected) -> None:
    """Checks loaded tensors' dtypes and shapes against ``expected``.

    Raises:
        PartitionFormatError: if a tensor is unexpected or differs.
    """
    for name, tensor in tensors.items():
        want = expected.get(name)
        if want is None:
            raise _bad(path, f"holds the tensor {name!r} meta.json does not list")
        if tensor.dtype != want[0] or list(tensor.shape) != want[1]:
            raise _bad(path, f"tensor {name!r} is {tensor.dtype} of shape "
                             f"{list(tensor.shape)}, meta.json says {want[0]} of {want[1]}")


def _check_range(path: Path, name: str, ids: Tensor, high: int) -> None:
    if ids.numel():
        low, top = (int(v) for v in torch.aminmax(ids))
        if low < 0 or top >= high:
            raise _bad(path, f"{name} holds ids in [{low}, {top}], outside [0, {high})")


def check_node_part(path: Path, node_ids: Tensor, num_nodes: int, part: int,
                    book: Optional[PartitionBook]) -> None:
    """Owned ids: sorted, unique, in ``[0, num_nodes)``, owned by ``part``.

    Args:
        path: The node file, for messages.
        node_ids: Its ``node_ids``.
        num_nodes: Nodes of this node type in the whole graph.
        part: The part the file belongs to.
        book: The partition book of this node type (``None``: not checked).

    Raises:
        PartitionFormatError: if an id is out of range, repeated, unsorted
            or owned by another part.
    """
    _check_range(path, NODE_IDS, node_ids, num_nodes)
    if node_ids.numel() > 1 and not bool((node_ids[1:] > node_ids[:-1]).all()):
        raise _bad(path, f"{NODE_IDS} are not sorted and unique")
    if book is not None and node_ids.numel():
        owners = book.to_tensor().index_select(0, node_ids)
        if not bool((owners == part).all()):
            raise _bad(path, f"{NODE_IDS} lists nodes the partition book gives to other "
                             f"parts (a node must be owned by exactly one part)")


def check_edge_part(path: Path, tensors: dict[str, Tensor], num_src: int,
                    num_edges: int) -> None:
    """CSC of a part: ``indptr`` from 0 to the edge count, never decreasing;
    sources in ``[0, num_src)``, edge ids in ``[0, num_edges)`` and
    distinct (an edge is stored once; a part whose ids were all rewritten to
    0, checksums updated, would serve one edge's features for all).

    Raises:
        PartitionFormatError: naming the tensor that breaks the rule.
    """
    indptr = tensors[INDPTR]
    count = tensors[INDICES].numel()
    if int(indptr[0]) != 0 or int(indptr[-1]) != count \
            or not bool((indptr[1:] >= indptr[:-1]).all()):
        raise _bad(path, f"{INDPTR} must rise from 0 to {count} without decreasing")
    _check_range(path, INDICES, tensors[INDICES], num_src)
    _check_range(path, EDGE_IDS, tensors[EDGE_IDS], num_edges)
    _check_distinct(path, EDGE_IDS, tensors[EDGE_IDS], num_edges)


def _check_distinct(path: Path, name: str, ids: Tensor, bound: int) -> None:
    """Refuses repeated ids (already checked to lie in ``[0, bound)``)."""
    if not all_distinct(ids.long(), bound):
        raise _bad(path, f"{name} repeats an id: every edge must be stored once")


def check_book(path: Path, tensor: Tensor, num_parts: int,
               part_counts: list[int]) -> PartitionBook:
    """Builds the book of one node type and checks its counts per part.

    Raises:
        PartitionFormatError: if a part id is out of range or a part owns
            another number of nodes than ``meta.json`` says.
    """
    try:
        book = PartitionBook(tensor, num_parts)
    except InvalidPartitionArgumentError as exc:
        raise _bad(path, str(exc)) from exc
    counts = book.counts().tolist()
    if counts != part_counts:
        part = next(k for k, (a, b) in enumerate(zip(counts, part_counts)) if a != b)
        raise _bad(path, f"gives part {part} {counts[part]} nodes, meta.json says "
                         f"{part_counts[part]}")
    return book
