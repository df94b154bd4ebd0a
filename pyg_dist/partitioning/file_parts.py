"""Writing the dataset of a graph read from files once every node has an
owner: the book(s), then per node type its node files (one pass over node
windows), per edge type its shuffle into spill files, then per part the CSC
of every edge type. A homogeneous graph gives format version 1, a graph by
type version 2, and ``meta.json`` exactly as the in-memory writer
(:mod:`~pyg_dist.partitioning.writer`) builds it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

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
    META_FILE,
    book_file,
    edge_ends,
    edge_file,
    feature_specs,
    node_file,
    part_dir,
    recorder,
)
from pyg_dist.partitioning.file_source import EdgeKey, FileGraph, NodeKey
from pyg_dist.partitioning.memory_limit import MemoryBudget, release_freed_memory
from pyg_dist.partitioning.node_slices import NODE_WINDOW_OVERHEAD, part_rows, write_node_files
from pyg_dist.partitioning.safetensors_stream import SafetensorsFile
from pyg_dist.partitioning.stats import PartStats, balance, one_type_parts, summarize


class OneHost:
    """How the passes move rows on one host: straight into this process's
    files, every part written here. :mod:`~pyg_dist.partitioning.cross_host`
    gives the ranks' version (rows sent to the rank that writes their part)."""

    spill_name = ".spill"
    share = 1.0
    """Share of the working memory a window or chunk may take."""
    leads = True
    """Whether this process writes the books and ``meta.json``."""
    by_edge_id = False
    """Whether the spill files hold edges in no edge order (sort by edge id)."""

    def parts(self, num_parts: int) -> list[int]:
        """The parts this process writes."""
        return list(range(num_parts))

    def rows(self, count: int) -> int:
        """Rows of a window or chunk (the ranks agree on theirs)."""
        return count

    def nodes(self, tmp: Path, key: NodeKey, nodes: Any, book: np.ndarray, num_parts: int,
              window: int, bar: Any) -> dict[int, int]:
        """The node pass of one node type; the training nodes of each part written."""
        train = write_node_files(tmp, nodes, book, num_parts, window, bar,
                                 lambda k: node_file(k, key))
        return dict(enumerate(train))

    def edges(self, shuffle: EdgeShuffle, chunk: int, bar: Any) -> None:
        """The shuffle pass of one edge type."""
        shuffle.spill(chunk, bar)

    def gather(self, entries: list[dict[str, Any]], files: dict[str, Any]
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Every part's ``meta.json`` entry and every file's checksum."""
        return entries, files


def write_parts(tmp: Path, graph: FileGraph, node_part: np.ndarray, num_parts: int,
                budget: MemoryBudget, progress: bool, about: dict[str, Any],
                host: Optional[OneHost] = None) -> dict[str, Any]:
    """Writes every file of the dataset into ``tmp`` (this host's parts), and
    ``meta.json`` where this process leads.

    Args:
        tmp: The staging directory.
        graph: The input.
        node_part: Owner of every node of the homogeneous view.
        num_parts: K.
        budget: Sizes the windows, chunks and buckets.
        progress: Show a tqdm bar per pass.
        about: What ``meta.json`` records besides the graph and its parts
            (``graph_name``, ``partitioner``).
        host: How rows move between the processes writing the parts
            (``None``: :class:`OneHost`).

    Returns:
        ``meta.json``'s content.
    """
    from tqdm.auto import tqdm

    host = host or OneHost()
    files: dict[str, dict[str, Any]] = {}
    record = recorder(tmp, files)
    books = books_of(graph, node_part)
    book_entries = write_books(tmp, books, record, write=host.leads)
    parts = host.parts(num_parts)
    for k in parts:
        (tmp / part_dir(k)).mkdir()
    train = {}
    with tqdm(total=graph.num_nodes, desc="nodes", unit="node", disable=not progress) as bar:
        for key, nodes in graph.nodes.items():
            row_bytes = sum(2 * a.row_bytes for a in nodes.arrays.values())
            window = host.rows(budget.chunk_rows(row_bytes + NODE_WINDOW_OVERHEAD, host.share))
            train[key] = host.nodes(tmp, key, nodes, books[key], num_parts, window, bar)
    release_freed_memory()
    spill_root = tmp / host.spill_name
    shuffles = _new_shuffles(spill_root, graph, books, num_parts)
    with tqdm(total=graph.num_edges, desc="shuffle edges", unit="edge",
              disable=not progress) as bar:
        for key, shuffle in shuffles.items():
            host.edges(shuffle, host.rows(budget.chunk_rows(shuffle_bytes_per_edge(
                graph.edges[key].attribute_row_bytes), host.share)), bar)
            release_freed_memory()
    halo = {key: np.zeros(n.num_nodes, dtype=np.bool_) for key, n in graph.nodes.items()}
    rows = {key: part_rows(book, num_parts) for key, book in books.items()}
    entries = []
    with tqdm(total=graph.num_edges if len(parts) == num_parts else None, desc="csc",
              unit="edge", disable=not progress) as bar:
        for k in parts:
            entries.append(_write_part_csc(tmp, graph, books, rows, shuffles, k,
                                           {key: t.get(k, 0) for key, t in train.items()},
                                           halo, budget, bar, record, host.by_edge_id))
    shutil.rmtree(spill_root)
    meta = {**build_meta(graph, books, book_entries, *host.gather(entries, files)), **about}
    if host.leads:
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return meta


def books_of(graph: FileGraph, node_part: np.ndarray) -> dict[NodeKey, np.ndarray]:
    """The view's assignment cut into one book per node type (views, no copy)."""
    return {key: node_part[start:start + graph.nodes[key].num_nodes]
            for key, start in graph.offsets().items()}


def write_books(tmp: Path, books: dict[NodeKey, np.ndarray], record: Callable[[str], str],
                write: bool = True) -> list[dict[str, Any]]:
    """Writes every node type's book (unless ``write`` is false: a rank that
    does not write them); returns their ``meta.json`` entries."""
    entries = []
    for key, book in books.items():
        if write:
            with SafetensorsFile(tmp / book_file(key),
                                 {BOOK_KEY: (book.dtype, book.shape)}) as f:
                f.write_rows(BOOK_KEY, 0, book)
            record(book_file(key))
        entries.append({"type": key, "file": book_file(key), "key": BOOK_KEY,
                        "dtype": str(book.dtype)})
    return entries


def _new_shuffles(spill_root: Path, graph: FileGraph, books: dict[NodeKey, np.ndarray],
                 num_parts: int) -> dict[EdgeKey, EdgeShuffle]:
    """An :class:`EdgeShuffle` per edge type, each with its spill directory."""
    shuffles = {}
    for i, (key, edges) in enumerate(graph.edges.items()):
        spill_dir = spill_root / str(i)
        spill_dir.mkdir(parents=True)
        src, dst = edge_ends(key)
        shuffles[key] = EdgeShuffle(spill_dir, edges, books[dst], num_parts,
                                    src_part=books[src],
                                    file_name=lambda k, key=key: edge_file(k, key))
    return shuffles


def _write_part_csc(tmp: Path, graph: FileGraph, books: dict[NodeKey, np.ndarray],
                   rows: dict[NodeKey, np.ndarray], shuffles: dict[EdgeKey, EdgeShuffle],
                   k: int, train: dict[NodeKey, int],
                   halo: dict[NodeKey, np.ndarray], budget: MemoryBudget, bar: Any,
                   record: Callable[[str], str], by_edge_id: bool = False) -> dict[str, Any]:
    """Writes part ``k``'s edge file of every edge type from the spill files
    and checksums its node files; returns its ``meta.json`` entry with every
    per-type count (:func:`build_meta` keeps those of its version). ``rows``:
    every node's row in its part (:func:`~pyg_dist.partitioning.node_slices.part_rows`);
    ``halo``: one byte a node, per node type, the scratch of the halo count."""
    edge_entries = []
    for key, shuffle in shuffles.items():
        release_freed_memory()
        src, dst = edge_ends(key)
        num_owned = int(np.count_nonzero(books[dst] == k))
        sort_edges = sort_bytes_per_edge(graph.edges[key].attribute_row_bytes)
        part_stats = shuffle.write_part(tmp, k, rows[dst], num_owned,
                                        halo[src],
                                        budget.chunk_rows(sort_edges), bar, by_edge_id)
        edge_entries.append({"type": None if key is None else list(key),
                             "file": record(edge_file(k, key)),
                             "num_edges": part_stats.num_edges,
                             "num_cut_edges": part_stats.num_cut_edges})
    node_entries = []
    for key in graph.nodes:
        node_entries.append({"type": key, "file": record(node_file(k, key)),
                             "num_nodes": int(np.count_nonzero(books[key] == k)),
                             "num_halo_nodes": int(np.count_nonzero(halo[key])),
                             "num_train_nodes": train[key]})
        halo[key][:] = False
    part_stats = PartStats.of_entries(node_entries, edge_entries)
    return {"part": k, "dir": part_dir(k), "node_types": node_entries,
            "edge_types": edge_entries, "stats": part_stats.to_json()}


def build_meta(graph: FileGraph, books: dict[NodeKey, np.ndarray], book_entries: list,
               parts: list[dict[str, Any]], files: dict) -> dict[str, Any]:
    """``meta.json`` (without the partitioner and graph name) from the parts'
    entries of :func:`_write_part_csc`, in part order."""
    num_parts = len(parts)
    stats = [PartStats(**p["stats"]) for p in parts]
    node_types, edge_types = [], []
    for key, nodes in graph.nodes.items():
        entry = {"type": key, "num_nodes": nodes.num_nodes, "features": feature_specs(nodes.arrays)}
        if graph.is_hetero:
            entry["balance"] = balance(
                np.bincount(books[key], minlength=num_parts).tolist())
        node_types.append(entry)
    for i, (key, edges) in enumerate(graph.edges.items()):
        src, dst = edge_ends(key)
        entry = {"type": None if key is None else list(key), "src": src, "dst": dst,
                 "num_edges": edges.num_edges, "features": feature_specs(edges.arrays)}
        if graph.is_hetero:
            entry["edge_cut"] = sum(p["edge_types"][i]["num_cut_edges"] for p in parts)
            entry["balance"] = balance([p["edge_types"][i]["num_edges"] for p in parts])
        edge_types.append(entry)
    if not graph.is_hetero:
        parts = one_type_parts(parts)
    return {
        "format": FORMAT_NAME,
        "format_version": HETERO_FORMAT_VERSION if graph.is_hetero else FORMAT_VERSION,
        "num_parts": num_parts, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
        "is_hetero": graph.is_hetero, "node_types": node_types, "edge_types": edge_types,
        "books": book_entries, "parts": parts,
        "stats": summarize(stats, graph.num_nodes, graph.num_edges), "files": files,
    }
