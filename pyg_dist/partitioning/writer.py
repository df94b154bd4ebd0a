"""``pyg_dist.partition``: split a graph held in memory into parts and write
the dataset.

The writer validates everything it can before touching the disk, asks the
registry for the partitioner plugin, and writes into a temporary directory
beside ROOT that is renamed onto ROOT only when every file and ``meta.json``
are complete. On any error the temporary directory is removed: a failed run
leaves no partial output. The files are written by the passes that write a
graph read from files (:mod:`~pyg_dist.partitioning.file_parts`), with the
graph in memory as their source
(:mod:`~pyg_dist.partitioning.memory_source`): the same assignment gives the
same bytes either way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor

from pyg_dist.partitioning.dataset_dir import (
    build_partitioner,
    check_num_parts,
    check_root,
    partitioner_record,
    staged,
)
from pyg_dist.partitioning.edge_shuffle import shuffle_bytes_per_edge
from pyg_dist.partitioning.feature_dtype import feature_dtype_of, with_feature_dtype
from pyg_dist.partitioning.file_parts import write_parts
from pyg_dist.partitioning.file_source import FileGraph
from pyg_dist.partitioning.inputs import is_hetero_data, split_attributes, split_hetero_attributes
from pyg_dist.partitioning.memory_limit import MemoryBudget, default_limit
from pyg_dist.partitioning.memory_source import graph_source
from pyg_dist.partitioning.out_of_core import checked_assignment
from pyg_dist.partitioning.reader import PartitionReader
from pyg_dist.partitioning.splits import with_splits
from pyg_dist.plugins import PluginRegistry, default_registry

logger = logging.getLogger(__name__)

MIN_IN_MEMORY_WORKING = 64 << 20
"""Working memory of the writing passes over a small graph in memory."""


def partition(data: Any, num_parts: int, root: Union[str, os.PathLike],
              partitioner: str = "metis", *, overwrite: bool = False,
              registry: Optional[PluginRegistry] = None, progress: bool = False,
              graph_name: Optional[str] = None, splits: Optional[dict[str, Any]] = None,
              transform: Optional[Callable[[Any], Any]] = None,
              feature_dtype: Union[None, str, torch.dtype] = None,
              **options: Any) -> PartitionReader:
    """Partitions a graph and writes it to ``root`` in the pyg-dist format.

    Args:
        data: A homogeneous :class:`~torch_geometric.data.Data` with
            ``edge_index`` (written in format version 1), or a
            :class:`~torch_geometric.data.HeteroData` (version 2: node ids
            and files per type; type names must be usable in file names, see
            :func:`~pyg_dist.partitioning.format.type_name_problem`). Every
            node-level tensor (``x``, ``y``, masks, ...) and edge-level
            tensor (``edge_attr``, ...) is partitioned with it. The
            partitioner sees a heterogeneous graph as one homogeneous graph
            (:meth:`~pyg_dist.partitioning.inputs.GraphParts.partition_input`).
        num_parts: Number of parts, ``1 <= num_parts <= num_nodes`` (all
            types together).
        root: The dataset directory to create. It must not exist or be empty
            unless ``overwrite`` is set.
        partitioner: Name of a ``pyg_dist.partitioners`` plugin (``metis``,
            ``random``, or a third party's; ``pyg-dist plugins`` lists them).
        overwrite: Replace an existing non-empty ``root``.
        registry: Plugin registry to use (default: the installed plugins).
        progress: Show a tqdm progress bar.
        graph_name: Name recorded in ``meta.json``.
        splits: Index splits to store as boolean node masks
            ``<name>_mask``: ``{"train": ids, "valid": ids, ...}`` (ids or
            masks; OGB's ``get_idx_split()`` as it is), on a heterogeneous
            graph ``{name: {node_type: ids}}``
            (:mod:`pyg_dist.partitioning.splits`).
        transform: Applied to (a copy of) ``data`` before anything else,
            e.g. ``torch_geometric.transforms.ToUndirected()``.
        feature_dtype: ``"float16"`` or ``"bfloat16"``: store the node
            feature matrices (floating-point, two or more dimensions, such as
            ``x``) in that precision, half the bytes to serve
            (:mod:`pyg_dist.partitioning.feature_dtype`); ``None`` keeps them.
        **options: Options of the partitioner, e.g. ``balance_train=True``.

    Returns:
        A :class:`~pyg_dist.partitioning.reader.PartitionReader` over ``root``.

    Raises:
        InvalidPartitionArgumentError: bad ``num_parts``, empty graph, bad
            options, reserved attribute names, ``root`` not empty, or
            ``root`` cannot be created.
        PluginNotFoundError: no partitioner of that name is installed.
        PartitionError: the system refused a write (disk full, ...); nothing
            is left behind.
    """
    root = Path(root)
    dtype = feature_dtype_of(feature_dtype)
    data = with_feature_dtype(with_splits(data, splits, transform), dtype)
    graph = split_hetero_attributes(data) if is_hetero_data(data) else split_attributes(data)
    source = graph_source(graph)
    total_nodes = graph.total_nodes
    check_num_parts(num_parts, total_nodes)
    check_root(root, overwrite)
    registry = registry or default_registry
    plugin = build_partitioner(registry, partitioner, options)
    # The staging directory comes first: an unwritable ROOT is refused
    # before the partitioner runs (minutes for METIS on a big graph).
    from tqdm.auto import tqdm

    with staged(root) as tmp:
        # The writing passes show a bar each (nodes, shuffle edges, csc).
        with tqdm(total=1, desc="partition", unit="step", disable=not progress) as bar:
            bar.set_postfix_str(f"{partitioner}: assigning {total_nodes} nodes")
            assignment = plugin.assign(graph.partition_input(), num_parts)
            bar.update(1)
        if isinstance(assignment, Tensor):
            assignment = assignment.detach().cpu()
        node_part = checked_assignment(assignment, total_nodes, num_parts)
        write_parts(tmp, source, node_part, num_parts, _budget(source, num_parts), progress,
                    {"graph_name": graph_name,
                     "partitioner": partitioner_record(registry, partitioner, plugin)})
    logger.info("partitioned %d nodes into %d parts at %s", total_nodes, num_parts, root)
    return PartitionReader(root, verify=False)


def _budget(source: FileGraph, num_parts: int) -> MemoryBudget:
    """The working memory of the writing passes over a graph in memory: a
    part's edges (a quarter more, for imbalance) shuffled and sorted at
    once, so that no part is split into buckets, with at least
    :data:`MIN_IN_MEMORY_WORKING` and at most the out-of-core default limit."""
    attribute_bytes = max((e.attribute_row_bytes for e in source.edges.values()), default=0)
    part_edges = -(-source.num_edges // num_parts) * 5 // 4
    working = min(part_edges * shuffle_bytes_per_edge(attribute_bytes), default_limit())
    return MemoryBudget(limit=max(working, MIN_IN_MEMORY_WORKING) * 16 // 15 + 16,
                        baseline=0, state=0)
