"""Writing the dataset of a graph read from files once every node has an
owner: the book(s), then per node type its node files (one pass over node
windows), per edge type its shuffle into spill files, then per part the CSC
of every edge type. A homogeneous graph gives format version 1, a graph by
type version 2, and ``meta.json`` exactly as the in-memory writers
(:mod:`~pyg_dist.partitioning.writer`, :mod:`~pyg_dist.partitioning.hetero_writer`)
build it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pyg_dist.partitioning.edge_shuffle import (
    EdgeShuffle,
    shuffle_bytes_per_edge,
    sort_bytes_per_edge,
)
from pyg_dist.partitioning.file_names import (
    BOOK_KEY,
    FORMAT_NAME,
    FORMAT_VERSION,
    HETERO_FORMAT_VERSION,
    book_file,
    edge_file,
    node_file,
    part_dir,
    sha256_file,
)
from pyg_dist.partitioning.file_source import EdgeKey, FileGraph, NodeKey
from pyg_dist.partitioning.memory_limit import MemoryBudget, release_freed_memory
from pyg_dist.partitioning.node_slices import NODE_WINDOW_OVERHEAD, write_node_files
from pyg_dist.partitioning.safetensors_stream import SafetensorsFile
from pyg_dist.partitioning.stats import PartStats, summarize


def write_parts(tmp: Path, graph: FileGraph, node_part: np.ndarray, num_parts: int,
                budget: MemoryBudget, progress: bool) -> dict[str, Any]:
    """Writes every file of the dataset into ``tmp``.

    Args:
        tmp: The staging directory.
        graph: The input.
        node_part: Owner of every node of the homogeneous view.
        num_parts: K.
        budget: Sizes the windows, chunks and buckets.
        progress: Show a tqdm bar per pass.

    Returns:
        ``meta.json``'s content without the partitioner and graph name.
    """
    from tqdm.auto import tqdm

    files: dict[str, dict[str, Any]] = {}

    def record(name: str) -> str:
        path = tmp / name
        files[name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        return name

    books = _books(graph, node_part)
    book_entries = []
    for key, book in books.items():
        with SafetensorsFile(tmp / book_file(key), {BOOK_KEY: (book.dtype, book.shape)}) as f:
            f.write_rows(BOOK_KEY, 0, book)
        book_entries.append({"type": key, "file": record(book_file(key)), "key": BOOK_KEY,
                             "dtype": str(book.dtype)})
    for k in range(num_parts):
        (tmp / part_dir(k)).mkdir()
    train = {}
    with tqdm(total=graph.num_nodes, desc="nodes", unit="node", disable=not progress) as bar:
        for key, nodes in graph.nodes.items():
            row_bytes = sum(2 * a.row_bytes for a in nodes.arrays.values())
            train[key] = write_node_files(
                tmp, nodes, books[key], num_parts,
                budget.chunk_rows(row_bytes + NODE_WINDOW_OVERHEAD), bar,
                lambda k, key=key: node_file(k, key))
    release_freed_memory()
    shuffles = _shuffle(tmp / ".spill", graph, books, num_parts, budget, progress)
    parts, stats, edge_stats = _write_csc(tmp, graph, books, shuffles, train, num_parts,
                                          budget, progress, record)
    shutil.rmtree(tmp / ".spill")
    return _meta(graph, books, book_entries, parts, stats, edge_stats, files)


def _books(graph: FileGraph, node_part: np.ndarray) -> dict[NodeKey, np.ndarray]:
    """The view's assignment cut into one book per node type (views, no copy)."""
    return {key: node_part[start:start + graph.nodes[key].num_nodes]
            for key, start in graph.offsets().items()}


def _shuffle(spill_root: Path, graph: FileGraph, books: dict[NodeKey, np.ndarray],
             num_parts: int, budget: MemoryBudget, progress: bool) -> dict[EdgeKey, EdgeShuffle]:
    from tqdm.auto import tqdm

    shuffles = {}
    with tqdm(total=graph.num_edges, desc="shuffle edges", unit="edge",
              disable=not progress) as bar:
        for i, (key, edges) in enumerate(graph.edges.items()):
            spill_dir = spill_root / str(i)
            spill_dir.mkdir(parents=True)
            src, dst = (None, None) if key is None else (key[0], key[2])
            shuffle = EdgeShuffle(spill_dir, edges, books[dst], num_parts,
                                  src_part=books[src],
                                  file_name=lambda k, key=key: edge_file(k, key))
            shuffle.spill(budget.chunk_rows(shuffle_bytes_per_edge(edges.attribute_row_bytes)),
                          bar)
            shuffles[key] = shuffle
            release_freed_memory()
    return shuffles


def _write_csc(tmp: Path, graph: FileGraph, books: dict[NodeKey, np.ndarray],
               shuffles: dict[EdgeKey, EdgeShuffle], train: dict[NodeKey, list[int]],
               num_parts: int, budget: MemoryBudget, progress: bool,
               record: Callable[[str], str]) -> tuple[list, list, dict]:
    """Per part, every edge type's CSC; returns the parts' ``meta.json``
    entries, their :class:`PartStats` and per edge type its stored edges per
    part and cut."""
    from tqdm.auto import tqdm

    halo = {key: np.zeros(n.num_nodes, dtype=np.bool_) for key, n in graph.nodes.items()}
    edge_stats = {key: ([], 0) for key in graph.edges}
    parts, stats = [], []
    with tqdm(total=graph.num_edges, desc="csc", unit="edge", disable=not progress) as bar:
        for k in range(num_parts):
            edge_entries = []
            for key, shuffle in shuffles.items():
                release_freed_memory()
                dst = None if key is None else key[2]
                owned = np.flatnonzero(books[dst] == k)
                sort_edges = sort_bytes_per_edge(graph.edges[key].attribute_row_bytes)
                part_stats = shuffle.write_part(tmp, k, owned, halo[None if key is None
                                                                    else key[0]],
                                                budget.chunk_rows(sort_edges), bar)
                del owned
                stored, cut = edge_stats[key]
                edge_stats[key] = (stored + [part_stats.num_edges], cut + part_stats.num_cut_edges)
                edge_entries.append({"type": None if key is None else list(key),
                                     "file": record(edge_file(k, key)),
                                     "num_edges": part_stats.num_edges,
                                     "num_cut_edges": part_stats.num_cut_edges})
            node_entries = []
            for key in graph.nodes:
                node_entries.append({"type": key, "file": record(node_file(k, key)),
                                     "num_nodes": int(np.count_nonzero(books[key] == k)),
                                     "num_halo_nodes": int(np.count_nonzero(halo[key])),
                                     "num_train_nodes": train[key][k]})
                halo[key][:] = False
            part_stats = PartStats(
                num_nodes=sum(e["num_nodes"] for e in node_entries),
                num_edges=sum(e["num_edges"] for e in edge_entries),
                num_halo_nodes=sum(e["num_halo_nodes"] for e in node_entries),
                num_cut_edges=sum(e["num_cut_edges"] for e in edge_entries),
                num_train_nodes=sum(e["num_train_nodes"] for e in node_entries))
            if not graph.is_hetero:  # version 1 keeps only the counts of its one type
                node_entries = [{n: node_entries[0][n] for n in ("type", "file", "num_nodes")}]
                edge_entries = [{n: edge_entries[0][n] for n in ("type", "file", "num_edges")}]
            parts.append({"part": k, "dir": part_dir(k), "node_types": node_entries,
                          "edge_types": edge_entries, "stats": part_stats.to_json()})
            stats.append(part_stats)
    return parts, stats, edge_stats


def _balance(counts: list[int]) -> float:
    """Largest part / mean part (1.0 when the type is empty), as the
    in-memory writer computes it."""
    total = sum(counts)
    return max(counts) * len(counts) / total if total else 1.0


def _specs(arrays: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: {"dtype": str(a.dtype), "shape": list(a.shape[1:])}
            for name, a in arrays.items()}


def _meta(graph: FileGraph, books: dict[NodeKey, np.ndarray], book_entries: list,
          parts: list, stats: list[PartStats], edge_stats: dict, files: dict) -> dict[str, Any]:
    num_parts = len(parts)
    node_types, edge_types = [], []
    for key, nodes in graph.nodes.items():
        entry = {"type": key, "num_nodes": nodes.num_nodes, "features": _specs(nodes.arrays)}
        if graph.is_hetero:
            entry["balance"] = _balance(
                np.bincount(books[key], minlength=num_parts).tolist())
        node_types.append(entry)
    for key, edges in graph.edges.items():
        entry = {"type": None if key is None else list(key),
                 "src": None if key is None else key[0], "dst": None if key is None else key[2],
                 "num_edges": edges.num_edges, "features": _specs(edges.arrays)}
        if graph.is_hetero:
            stored, cut = edge_stats[key]
            entry["edge_cut"], entry["balance"] = cut, _balance(stored)
        edge_types.append(entry)
    return {
        "format": FORMAT_NAME,
        "format_version": HETERO_FORMAT_VERSION if graph.is_hetero else FORMAT_VERSION,
        "num_parts": num_parts, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
        "is_hetero": graph.is_hetero, "node_types": node_types, "edge_types": edge_types,
        "books": book_entries, "parts": parts,
        "stats": summarize(stats, graph.num_nodes, graph.num_edges), "files": files,
    }
