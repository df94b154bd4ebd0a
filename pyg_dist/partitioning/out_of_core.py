"""``pyg_dist.partitioning.partition_files``: partition a graph read from files
under a memory limit (``pyg-dist partition --from DIR``).

The passes, each with its own progress bar and each holding at most a chunk
of edges or a window of nodes besides the per-node state (the book and a
halo bitmap, a few bytes a node):

1. **assign**: the partitioner plugin sees the edges in chunks
   (:class:`~pyg_dist.partitioning.file_source.EdgeStream`) and returns the
   owner of every node. Plugins without ``assign_stream`` (METIS) get the
   whole graph in memory if their own estimate fits the limit, and a
   :class:`~pyg_dist.errors.PartitionMemoryError` naming what they would need
   otherwise.
2. **nodes**: every part's node file, one pass over node windows
   (:mod:`~pyg_dist.partitioning.node_slices`).
3. **shuffle**: every edge into its owner's spill file
   (:mod:`~pyg_dist.partitioning.edge_shuffle`).
4. **csc**: per part, its CSC from its spill file, sorted in buckets that fit.

The output is the format :func:`~pyg_dist.partitioning.writer.partition`
writes, file for file: on a graph that fits, the same assignment gives the
same bytes, ``meta.json`` included (``tests/partitioning/test_out_of_core.py``).
Nothing here imports torch unless a plugin needs the in-memory fallback.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.dataset_dir import (
    book_dtype_name,
    build_partitioner,
    check_num_parts,
    check_root,
    partitioner_record,
    staged,
)
from pyg_dist.partitioning.edge_shuffle import shuffle_bytes_per_edge
from pyg_dist.partitioning.file_parts import write_parts
from pyg_dist.partitioning.file_source import EdgeStream, FileGraph
from pyg_dist.partitioning.memory_limit import (
    MIN_WORKING_BYTES,
    MemoryBudget,
    bounded_allocation,
    current_rss,
    default_limit,
    format_size,
    memory_error,
    release_freed_memory,
)
from pyg_dist.plugins import PluginRegistry, default_registry

logger = logging.getLogger(__name__)

ASSIGN_BYTES_PER_EDGE = 192
"""Bytes per edge of a chunk a streaming partitioner may hold (its
``EdgeStream`` is sized by it): the chunk itself (16), both directions, their
sort order and gathered copies (about 96), and room for its own."""
ROW_GROUP_BYTES_PER_ROW = 128
"""What pyarrow holds per row of the row group it decodes (buffers, pages,
allocator arenas; measured with pre_buffer off and one thread), whatever the
batch size."""


def partition_files(source: Union[str, os.PathLike, FileGraph], num_parts: int,
                    root: Union[str, os.PathLike], partitioner: str = "hash", *,
                    memory_limit: Optional[int] = None, chunk_edges: Optional[int] = None,
                    overwrite: bool = False,
                    registry: Optional[PluginRegistry] = None, progress: bool = False,
                    graph_name: Optional[str] = None, **options: Any) -> dict[str, Any]:
    """Partitions the graph in ``source`` (files) and writes ``root``, within
    ``memory_limit`` bytes of peak RSS.

    Args:
        source: The input directory (``edges/*.parquet``, ``nodes/*.npy``;
            ``docs/partition-format.md``, "Input from files") or an opened
            :class:`~pyg_dist.partitioning.file_source.FileGraph`.
        num_parts: Number of parts, ``1 <= num_parts <= num_nodes``.
        root: The dataset directory to create (as for
            :func:`~pyg_dist.partitioning.writer.partition`).
        partitioner: A ``pyg_dist.partitioners`` plugin: ``hash``,
            ``streaming`` and ``random`` work in bounded memory; others get
            the graph in memory when it fits the limit.
        memory_limit: Bytes the process may hold at its peak (``None``:
            :func:`~pyg_dist.partitioning.memory_limit.default_limit`).
        chunk_edges: At most this many edges (or nodes) per chunk, bucket
            and window (``None``: as many as the limit allows); smaller
            chunks only cost time.
        overwrite: Replace a non-empty ``root``.
        registry: Plugin registry (default: the installed plugins).
        progress: Show a tqdm bar per pass.
        graph_name: Name recorded in ``meta.json``.
        **options: The partitioner's options.

    Returns:
        The ``meta.json`` written.

    Raises:
        InvalidPartitionArgumentError: bad input files, ``num_parts``,
            options or ``root``.
        PartitionMemoryError: the limit is too small for the per-node state,
            or for a plugin that needs the graph in memory; names the need.
        PluginNotFoundError: no partitioner of that name is installed.
        PartitionError: the system refused a write; nothing is left behind.
    """
    graph = source if isinstance(source, FileGraph) else FileGraph.open(source)
    root = Path(root)
    check_num_parts(num_parts, graph.num_nodes)
    check_root(root, overwrite)
    limit = default_limit() if memory_limit is None else int(memory_limit)
    registry = registry or default_registry
    plugin = build_partitioner(registry, partitioner, options, ("assign_stream", "assign"))
    # Freed chunks must leave the RSS within a pass, not only between passes
    # (memory_limit.bounded_allocation: pyarrow on malloc, a fixed mmap threshold).
    with bounded_allocation():
        node_part, budget = _assign_within(plugin, graph, num_parts, limit, chunk_edges)
        with staged(root) as tmp:
            meta = write_parts(tmp, graph, node_part, num_parts, budget, progress,
                               {"graph_name": graph_name,
                                "partitioner": partitioner_record(registry, partitioner, plugin)})
    logger.info("partitioned %d nodes into %d parts at %s", graph.num_nodes, num_parts, root)
    return meta



def _assign_within(plugin: Any, graph: FileGraph, num_parts: int, limit: int,
                   chunk_edges: Optional[int]) -> tuple[np.ndarray, MemoryBudget]:
    """The owner of every node and the budget of the writing passes.

    The footprint is measured once, before any pass, with the plugin loaded
    (random and metis import torch) and once pyarrow has decoded something:
    memory a pass frees may stay with the process (the allocator keeps it),
    but the next pass reuses it.
    """
    graph.warm_up()
    release_freed_memory()
    baseline = current_rss()
    budget = working_budget(limit, baseline, graph, num_parts,
                            max_part_nodes=-(-graph.num_nodes // num_parts), cap=chunk_edges)
    logger.info("partitioning %d nodes, %d edges from %s under %s (%s working, chunks of "
                "%d edges)", graph.num_nodes, graph.num_edges, graph.root,
                format_size(limit), format_size(budget.working),
                budget.chunk_rows(shuffle_bytes_per_edge(0)))
    node_part = assign_parts(plugin, graph, num_parts, budget.chunk_rows(ASSIGN_BYTES_PER_EDGE),
                        limit)
    release_freed_memory()
    counts = np.bincount(node_part, minlength=num_parts)
    return node_part, working_budget(limit, baseline, graph, num_parts,
                                     max_part_nodes=int(counts.max()), cap=chunk_edges)

def working_budget(limit: int, baseline: int, graph: FileGraph, num_parts: int,
                   max_part_nodes: int, cap: Optional[int]) -> MemoryBudget:
    """The working memory once the process and the per-node state are counted:
    the book (1-2 bytes a node), the halo bitmap (1), the assignment while a
    plugin returns it and later every node's row in its part (8, then 4),
    per part its counts, indptr and their temporaries, and what pyarrow holds
    to decode one row group (:data:`ROW_GROUP_BYTES_PER_ROW`)."""
    per_node = book_dtype(num_parts).itemsize + 1 + 8
    row_group = graph.max_row_group * ROW_GROUP_BYTES_PER_ROW
    state = graph.num_nodes * per_node + 24 * (max_part_nodes + 1) + row_group
    budget = MemoryBudget(limit=limit, baseline=baseline, state=state, max_rows=cap)
    if budget.working < MIN_WORKING_BYTES <= budget.working + row_group:
        fits = max(1024, (budget.working + row_group) // (2 * ROW_GROUP_BYTES_PER_ROW))
        raise memory_error(
            f"the parquet edge files have row groups of {graph.max_row_group} rows, which "
            f"take about {format_size(row_group)} to read: too much for a limit of "
            f"{format_size(limit)}; rewrite them with smaller row groups "
            f"(pyarrow.parquet.write_table(..., row_group_size={fits})) or raise "
            f"--memory-limit", (budget.baseline + state + MIN_WORKING_BYTES) * 16 // 15)
    budget.check()
    return budget


def book_dtype(num_parts: int) -> np.dtype:
    """The dtype of a book of ``num_parts`` parts, as numpy's (the in-memory
    writer's rule: :func:`~pyg_dist.partitioning.dataset_dir.book_dtype_name`)."""
    return np.dtype(book_dtype_name(num_parts))


def assign_parts(plugin: Any, graph: FileGraph, num_parts: int, chunk_edges: int,
                 limit: int, stream: Optional[EdgeStream] = None) -> np.ndarray:
    """The owner of every node, in the book's dtype (``stream``: the one the
    plugin sees, default one of ``chunk_edges`` edges on one host)."""
    if callable(getattr(plugin, "assign_stream", None)):
        assignment = plugin.assign_stream(stream or EdgeStream(graph, chunk_edges), num_parts)
    else:
        assignment = _assign_in_memory(plugin, graph, num_parts, chunk_edges, limit)
    return checked_assignment(assignment, graph.num_nodes, num_parts)


def checked_assignment(assignment: Any, num_nodes: int, num_parts: int) -> np.ndarray:
    """A plugin's answer (an integer array or CPU tensor, one part id per
    node) as a book, in the book's dtype.

    Raises:
        InvalidPartitionArgumentError: if it is not one integer per node in
            ``[0, num_parts)``.
    """
    assignment = np.asarray(assignment)
    if assignment.ndim != 1 or assignment.shape[0] != num_nodes or not (
            np.issubdtype(assignment.dtype, np.integer)):
        raise InvalidPartitionArgumentError(
            f"the partitioner returned {assignment.shape} {assignment.dtype} part ids for "
            f"{num_nodes} nodes; it must return one per node, an integer")
    if assignment.size and (int(assignment.min()) < 0 or int(assignment.max()) >= num_parts):
        raise InvalidPartitionArgumentError(
            f"the partitioner's output is invalid: part ids must lie in [0, {num_parts})")
    return assignment.astype(book_dtype(num_parts), copy=False)


def _assign_in_memory(plugin: Any, graph: FileGraph, num_parts: int, chunk_edges: int,
                      limit: int) -> Any:
    """A plugin without ``assign_stream`` gets the whole graph, if its memory
    estimate (``memory_estimate(num_nodes, num_edges)``; 16 bytes an edge
    without one) fits what the limit leaves."""
    estimate = getattr(plugin, "memory_estimate", None)
    need = (int(estimate(graph.num_nodes, graph.num_edges)) if callable(estimate)
            else 16 * graph.num_edges + 8 * graph.num_nodes)
    have = limit - current_rss()
    name = type(plugin).__name__
    if need > have:
        raise memory_error(
            f"{name} needs the whole graph in memory: about {format_size(need)} for "
            f"{graph.num_nodes} nodes and {graph.num_edges} edges, but the memory limit "
            f"{format_size(limit)} leaves {format_size(max(0, have))}; use a streaming "
            f"partitioner (-p streaming or -p hash), raise --memory-limit to at least "
            f"{format_size(limit - have + need)}, or partition on a bigger host",
            limit - have + need)
    # torch is imported here only: the streaming path never needs it.
    import torch

    from pyg_dist.partitioning.graph import PartitionInput

    edge_index = torch.empty(2, graph.num_edges, dtype=torch.int64)
    view, first = edge_index.numpy(), 0  # pyarrow's arrays are read-only: copy
    for src, dst in graph.view_chunks(chunk_edges):
        view[0, first:first + src.size] = src
        view[1, first:first + src.size] = dst
        first += src.size
    train_mask = torch.from_numpy(graph.view_train_mask(0, graph.num_nodes)) \
        if graph.has_train_mask() else None
    view = PartitionInput.of_types({key: n.num_nodes for key, n in graph.nodes.items()},
                                   edge_index, train_mask)
    result = plugin.assign(view, num_parts)
    return result.numpy() if isinstance(result, torch.Tensor) else result
