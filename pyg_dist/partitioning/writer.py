"""``pyg_dist.partition``: split a graph into parts and write the dataset.

The writer validates everything it can before touching the disk, asks the
registry for the partitioner plugin, and writes into a temporary directory
beside ROOT that is renamed onto ROOT only when every file and ``meta.json``
are complete. On any error the temporary directory is removed: a failed run
leaves no partial output.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError, PygDistError
from pyg_dist.partitioning.book import PartitionBook, book_dtype
from pyg_dist.partitioning.dataset_dir import (
    build_partitioner,
    check_root,
    partitioner_record,
    staged,
)
from pyg_dist.partitioning.feature_dtype import feature_dtype_of, with_feature_dtype
from pyg_dist.partitioning.format import (
    BOOK_FILE,
    BOOK_KEY,
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    dtype_name,
    part_dir,
    recorder,
    save_tensors,
)
from pyg_dist.partitioning.graph import PartitionInput
from pyg_dist.partitioning.hetero_book import HeteroPartitionBook
from pyg_dist.partitioning.hetero_inputs import (
    HeteroGraphParts,
    is_hetero_data,
    split_hetero_attributes,
)
from pyg_dist.partitioning.hetero_writer import write_hetero
from pyg_dist.partitioning.inputs import GraphParts, split_attributes
from pyg_dist.partitioning.layout import GraphSplitter, edge_tensors, node_tensors, summarize
from pyg_dist.partitioning.reader import PartitionReader
from pyg_dist.partitioning.splits import with_splits
from pyg_dist.plugins import PluginRegistry, default_registry

logger = logging.getLogger(__name__)


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
            (:meth:`~pyg_dist.partitioning.hetero_inputs.HeteroGraphParts.partition_input`).
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
    hetero = is_hetero_data(data)
    graph = split_hetero_attributes(data) if hetero else split_attributes(data)
    total_nodes = graph.total_nodes if hetero else graph.num_nodes
    _check_num_parts(num_parts, total_nodes)
    check_root(root, overwrite)
    registry = registry or default_registry
    plugin = build_partitioner(registry, partitioner, options)

    from tqdm.auto import tqdm

    # The staging directory comes first: an unwritable ROOT is refused
    # before the partitioner runs (minutes for METIS on a big graph).
    with tqdm(total=num_parts + 2, desc="partition", unit="step",
              disable=not progress) as bar:
        with staged(root) as tmp:
            bar.set_postfix_str(f"{partitioner}: assigning {total_nodes} nodes")
            if hetero:
                book = _assign_hetero(plugin, graph, num_parts)
                bar.update(1)
                files: dict[str, dict[str, Any]] = {}
                meta = write_hetero(tmp, graph, book, recorder(tmp, files), bar)
                meta["files"] = files
            else:
                book = _assign(plugin, graph, num_parts)
                bar.update(1)
                meta = _write_all(tmp, graph, book, bar)
            meta["graph_name"] = graph_name
            meta["partitioner"] = partitioner_record(registry, partitioner, plugin)
            (tmp / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
        bar.update(1)
    logger.info("partitioned %d nodes into %d parts at %s", total_nodes, num_parts, root)
    return PartitionReader(root, verify=False)


def _check_num_parts(num_parts: Any, num_nodes: int) -> None:
    if isinstance(num_parts, bool) or not isinstance(num_parts, int):
        raise InvalidPartitionArgumentError(f"num_parts must be an int, got {num_parts!r}")
    if num_parts < 1 or num_parts > num_nodes:
        raise InvalidPartitionArgumentError(
            f"num_parts must lie in [1, {num_nodes}] (the number of nodes); got {num_parts}")
    book_dtype(num_parts)


def _assign(plugin: Any, graph: GraphParts, num_parts: int) -> PartitionBook:
    view = PartitionInput(graph.num_nodes, graph.edge_index,
                          train_mask=graph.node_features.get("train_mask"))
    return _run_plugin(plugin, view, num_parts)


def _assign_hetero(plugin: Any, graph: HeteroGraphParts,
                   num_parts: int) -> HeteroPartitionBook:
    whole = _run_plugin(plugin, graph.partition_input(), num_parts)
    return HeteroPartitionBook.from_assignment(whole.to_tensor(), graph.num_nodes, num_parts)


def _run_plugin(plugin: Any, view: PartitionInput, num_parts: int) -> PartitionBook:
    assignment = plugin.assign(view, num_parts)
    if not isinstance(assignment, Tensor):
        assignment = torch.as_tensor(assignment)
    if assignment.dim() != 1 or assignment.numel() != view.num_nodes:
        raise InvalidPartitionArgumentError(
            f"the partitioner returned {tuple(assignment.shape)} part ids for "
            f"{view.num_nodes} nodes; it must return one per node")
    try:
        return PartitionBook(assignment, num_parts)
    except PygDistError as exc:
        raise InvalidPartitionArgumentError(f"the partitioner's output is invalid: {exc}") from exc


def _write_all(tmp: Path, graph: GraphParts, book: PartitionBook, bar: Any) -> dict[str, Any]:
    files: dict[str, dict[str, Any]] = {}
    record = recorder(tmp, files)
    save_tensors(tmp / BOOK_FILE, {BOOK_KEY: book.to_tensor()})
    record(BOOK_FILE)
    splitter = GraphSplitter(book.to_tensor(), book.num_parts, graph.edge_index)
    parts, stats = [], []
    train_mask = graph.node_features.get("train_mask")
    for k in range(book.num_parts):
        bar.set_postfix_str(f"writing part {k}")
        owned = splitter.owned(k)
        (tmp / part_dir(k)).mkdir()
        topo = splitter.topology(k, owned.numel())
        part_stats = splitter.stats(k, owned, topo["indices"], train_mask)
        nodes_name = f"{part_dir(k)}/nodes.safetensors"
        edges_name = f"{part_dir(k)}/edges.safetensors"
        save_tensors(tmp / edges_name, edge_tensors(topo, graph.edge_features))
        del topo
        save_tensors(tmp / nodes_name, node_tensors(owned, graph.node_features))
        parts.append({
            "part": k, "dir": part_dir(k),
            "node_types": [{"type": None, "file": record(nodes_name),
                            "num_nodes": part_stats.num_nodes}],
            "edge_types": [{"type": None, "file": record(edges_name),
                            "num_edges": part_stats.num_edges}],
            "stats": part_stats.to_json(),
        })
        stats.append(part_stats)
        bar.update(1)
    return {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
        "num_parts": book.num_parts, "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges, "is_hetero": False,
        "node_types": [{"type": None, "num_nodes": graph.num_nodes,
                        "features": _specs(graph.node_features)}],
        "edge_types": [{"type": None, "src": None, "dst": None, "num_edges": graph.num_edges,
                        "features": _specs(graph.edge_features)}],
        "books": [{"type": None, "file": BOOK_FILE, "key": BOOK_KEY,
                   "dtype": dtype_name(book.to_tensor().dtype)}],
        "parts": parts,
        "stats": summarize(stats, graph.num_nodes, graph.num_edges),
        "files": files,
    }


def _specs(features: dict[str, Tensor]) -> dict[str, dict[str, Any]]:
    return {name: {"dtype": dtype_name(t.dtype), "shape": list(t.shape[1:])}
            for name, t in features.items()}
