"""The node files of every part, written in one pass over node windows.

Each part's node file (``nodes.safetensors``; per type
``nodes__TYPE.safetensors``) holds its owned ids (sorted) and their rows of
every node attribute. Counts per part are known from the book, so all K
files are laid out first; then a window of consecutive node ids is read from
every array, its rows are grouped by owner (a stable sort keeps them in id
order) and appended to each part's file at that part's running row. Every
input byte is read once, whatever K.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pyg_dist.partitioning.file_names import NODE_IDS, part_dir
from pyg_dist.partitioning.file_source import NodeSet
from pyg_dist.partitioning.safetensors_stream import SafetensorsFile

NODE_WINDOW_OVERHEAD = 24
"""Bytes a window holds per node besides the attribute rows (owner, order, ids)."""


def node_file_name(part: int) -> str:
    """A part's node file, relative to ROOT."""
    return f"{part_dir(part)}/nodes.safetensors"


def write_node_files(tmp: Path, nodes: NodeSet, node_part: np.ndarray, num_parts: int,
                     window: int, bar: Any,
                     file_name: Callable[[int], str] = node_file_name) -> list[int]:
    """Writes the node file of one node type for every part.

    Args:
        tmp: The staging directory (``part-K/`` must exist).
        nodes: The input nodes (of one type).
        node_part: Owner of every node (of that type).
        num_parts: K.
        window: Nodes per window (sized from the memory limit).
        bar: A tqdm bar advanced by nodes.
        file_name: Part -> its node file of this type, relative to ``tmp``.

    Returns:
        The owned training nodes of every part (0s without ``train_mask``).
    """
    counts = np.bincount(node_part, minlength=num_parts)
    files: dict[int, SafetensorsFile] = {}
    try:
        for k in range(num_parts):
            files[k] = open_node_file(tmp / file_name(k), nodes, int(counts[k]))
        cursor = np.zeros(num_parts, dtype=np.int64)
        train = np.zeros(num_parts, dtype=np.int64)
        for start in range(0, nodes.num_nodes, window):
            stop = min(start + window, nodes.num_nodes)
            for k, ids, rows in window_by_part(nodes, node_part, num_parts, start, stop):
                train[k] += write_node_rows(files[k], int(cursor[k]), ids, rows)
                cursor[k] += ids.size
            bar.update(stop - start)
    finally:
        for f in files.values():
            f.close()
    return [int(t) for t in train]


def open_node_file(path: Path, nodes: NodeSet, count: int) -> SafetensorsFile:
    """A part's node file of ``count`` rows of every attribute of ``nodes``,
    laid out to be filled by :func:`write_node_rows`."""
    specs = {NODE_IDS: (np.dtype(np.int64), (count,))}
    for name, array in nodes.arrays.items():
        specs[name] = (array.dtype, (count, *array.shape[1:]))
    return SafetensorsFile(path, specs)


def window_by_part(nodes: NodeSet, node_part: np.ndarray, num_parts: int, start: int,
                   stop: int) -> Iterator[tuple[int, np.ndarray, dict[str, np.ndarray]]]:
    """The nodes ``start:stop`` grouped by owner: ``(part, ids, rows)`` for
    every part owning some, ids (int64) in id order and every attribute's
    rows of them, read once for the window."""
    owner = node_part[start:stop]
    order = np.argsort(owner, kind="stable")
    bounds = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=num_parts), out=bounds[1:])
    rows = {name: array.read_rows(start, stop) for name, array in nodes.arrays.items()}
    for k in np.flatnonzero(bounds[1:] > bounds[:-1]):
        sel = order[bounds[k]:bounds[k + 1]]
        yield int(k), sel.astype(np.int64) + start, {n: block[sel] for n, block in rows.items()}


def write_node_rows(out: SafetensorsFile, first: int, ids: np.ndarray,
                    rows: dict[str, np.ndarray]) -> int:
    """Writes nodes ``ids`` and their ``rows`` at row ``first`` of a part's
    node file; returns how many of them are training nodes (``train_mask``
    set)."""
    out.write_rows(NODE_IDS, first, ids)
    for name, block in rows.items():
        out.write_rows(name, first, block)
    return int(np.count_nonzero(rows["train_mask"])) if "train_mask" in rows else 0


def part_rows(node_part: np.ndarray, num_parts: int, window: int = 1 << 20) -> np.ndarray:
    """The row of every node in its part's node file (its rank among the
    part's nodes, which are in id order): the CSC pass's destination
    columns, one lookup an edge instead of a binary search.

    Args:
        node_part: Owner of every node (of one type).
        num_parts: K.
        window: Nodes per step (the temporaries are 24 bytes a node of it).

    Returns:
        int32 rows (int64 if a part holds 2**31 nodes or more).
    """
    counts = np.bincount(node_part, minlength=num_parts)
    dtype = np.int32 if node_part.size == 0 or counts.max() < (1 << 31) else np.int64
    rows = np.empty(node_part.size, dtype=dtype)
    cursor = np.zeros(num_parts, dtype=np.int64)
    for start in range(0, node_part.size, window):
        owner = node_part[start:start + window]
        order = np.argsort(owner, kind="stable")
        sizes = np.bincount(owner, minlength=num_parts)
        first = np.cumsum(sizes) - sizes  # where each part's run begins in `order`
        sorted_owner = owner[order]
        rows[start + order] = (np.arange(order.size) - first[sorted_owner]
                               + cursor[sorted_owner])
        cursor += sizes
    return rows
