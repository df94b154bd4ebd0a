"""Writing a heterogeneous graph (format version 2) once every node of every
type has an owner.

Per node type a book (``book__<type>.safetensors``) and per part a node file
(``part-K/nodes__<type>.safetensors``); per edge type and part the CSC of the
owned destinations' incoming edges (``part-K/edges__<src>__<rel>__<dst>.safetensors``),
stored, as in version 1, at the part that owns the destination. Ids are per
type: ``indices`` are source ids of the source type, ``edge_ids`` columns of
that edge type's ``edge_index``. One part at a time, as the homogeneous writer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pyg_dist.partitioning.format import (
    BOOK_KEY,
    FORMAT_NAME,
    HETERO_FORMAT_VERSION,
    book_file,
    dtype_name,
    edge_file,
    node_file,
    part_dir,
    save_tensors,
)
from pyg_dist.partitioning.hetero_book import HeteroPartitionBook
from pyg_dist.partitioning.hetero_inputs import HeteroGraphParts
from pyg_dist.partitioning.layout import (
    GraphSplitter,
    PartStats,
    edge_tensors,
    node_tensors,
    summarize,
)


def write_hetero(tmp: Path, graph: HeteroGraphParts, book: HeteroPartitionBook,
                 record: Callable[[str], str], bar: Any) -> dict[str, Any]:
    """Writes the books and every part of a heterogeneous graph into ``tmp``.

    Args:
        tmp: The (temporary) dataset directory.
        graph: The validated graph.
        book: Its owner of every node, per node type.
        record: Checksums a written file (name relative to ``tmp``) and
            returns its name.
        bar: A tqdm bar, advanced once per part.

    Returns:
        ``meta.json``'s content, without the partitioner and graph name.
    """
    books = []
    for node_type in graph.node_types:
        name = book_file(node_type)
        save_tensors(tmp / name, {BOOK_KEY: book[node_type].to_tensor()})
        books.append({"type": node_type, "file": record(name), "key": BOOK_KEY,
                      "dtype": dtype_name(book[node_type].to_tensor().dtype)})
    splitters = {
        et: GraphSplitter(book[et[2]].to_tensor(), book.num_parts, ei,
                          src_part=book[et[0]].to_tensor())
        for et, ei in graph.edge_index.items()}
    cut = dict.fromkeys(graph.edge_types, 0)
    part_edges = {et: [] for et in graph.edge_types}
    parts, stats = [], []
    for k in range(book.num_parts):
        bar.set_postfix_str(f"writing part {k}")
        (tmp / part_dir(k)).mkdir()
        owned = {t: book[t].owned(k) for t in graph.node_types}
        halo: dict[str, list[Tensor]] = {t: [] for t in graph.node_types}
        edge_entries = []
        for et, splitter in splitters.items():
            topo = splitter.topology(k, owned[et[2]].numel())
            foreign = splitter.foreign(k, topo["indices"])
            halo[et[0]].append(foreign)
            cut[et] += foreign.numel()
            part_edges[et].append(topo["indices"].numel())
            name = edge_file(k, et)
            save_tensors(tmp / name, edge_tensors(topo, graph.edge_features[et]))
            edge_entries.append({"type": list(et), "file": record(name),
                                 "num_edges": topo["indices"].numel(),
                                 "num_cut_edges": foreign.numel()})
            del topo
        node_entries = []
        for t in graph.node_types:
            name = node_file(k, t)
            save_tensors(tmp / name, node_tensors(owned[t], graph.node_features[t]))
            mask = graph.node_features[t].get("train_mask")
            train = int(mask[owned[t]].sum()) if _is_mask(mask) else 0
            node_entries.append({
                "type": t, "file": record(name), "num_nodes": owned[t].numel(),
                "num_halo_nodes": torch.unique(torch.cat(halo[t])).numel() if halo[t] else 0,
                "num_train_nodes": train})
        part_stats = PartStats.of_entries(node_entries, edge_entries)
        parts.append({"part": k, "dir": part_dir(k), "node_types": node_entries,
                      "edge_types": edge_entries, "stats": part_stats.to_json()})
        stats.append(part_stats)
        bar.update(1)
    counts = book.counts()
    return {
        "format": FORMAT_NAME, "format_version": HETERO_FORMAT_VERSION,
        "num_parts": book.num_parts, "num_nodes": graph.total_nodes,
        "num_edges": graph.total_edges, "is_hetero": True,
        "node_types": [{"type": t, "num_nodes": graph.num_nodes[t],
                        "features": _specs(graph.node_features[t]),
                        "balance": _balance(counts[t].tolist())}
                       for t in graph.node_types],
        "edge_types": [{"type": list(et), "src": et[0], "dst": et[2],
                        "num_edges": graph.num_edges(et),
                        "features": _specs(graph.edge_features[et]),
                        "edge_cut": cut[et], "balance": _balance(part_edges[et])}
                       for et in graph.edge_types],
        "books": books,
        "parts": parts,
        "stats": summarize(stats, graph.total_nodes, graph.total_edges),
    }


def _is_mask(mask: Any) -> bool:
    return isinstance(mask, Tensor) and mask.dtype == torch.bool and mask.dim() == 1


def _balance(counts: list[int]) -> float:
    """Largest part / mean part (1.0 when the type is empty)."""
    total = sum(counts)
    return max(counts) * len(counts) / total if total else 1.0


def _specs(features: dict[str, Tensor]) -> dict[str, dict[str, Any]]:
    return {name: {"dtype": dtype_name(t.dtype), "shape": list(t.shape[1:])}
            for name, t in features.items()}
