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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError, PygDistError
from pyg_dist.partitioning.book import PartitionBook
from pyg_dist.partitioning.dataset_dir import (
    build_partitioner,
    check_num_parts,
    check_root,
    partitioner_record,
    staged,
)
from pyg_dist.partitioning.feature_dtype import feature_dtype_of, with_feature_dtype
from pyg_dist.partitioning.format import (
    BOOK_KEY,
    FORMAT_NAME,
    FORMAT_VERSION,
    HETERO_FORMAT_VERSION,
    META_FILE,
    book_file,
    dtype_name,
    edge_ends,
    edge_file,
    feature_specs,
    node_file,
    part_dir,
    recorder,
    save_tensors,
)
from pyg_dist.partitioning.graph import PartitionInput
from pyg_dist.partitioning.hetero_book import HeteroPartitionBook
from pyg_dist.partitioning.inputs import (
    GraphParts,
    is_hetero_data,
    split_attributes,
    split_hetero_attributes,
)
from pyg_dist.partitioning.layout import GraphSplitter, edge_tensors, node_tensors
from pyg_dist.partitioning.reader import PartitionReader
from pyg_dist.partitioning.splits import with_splits
from pyg_dist.partitioning.stats import PartStats, balance, one_type_parts, summarize
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
    total_nodes = graph.total_nodes
    check_num_parts(num_parts, total_nodes)
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
            books = _assign(plugin, graph, num_parts)
            bar.update(1)
            files: dict[str, dict[str, Any]] = {}
            meta = _write_parts(tmp, graph, books, recorder(tmp, files), bar)
            meta["files"] = files
            meta["graph_name"] = graph_name
            meta["partitioner"] = partitioner_record(registry, partitioner, plugin)
            (tmp / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
        bar.update(1)
    logger.info("partitioned %d nodes into %d parts at %s", total_nodes, num_parts, root)
    return PartitionReader(root, verify=False)


def _assign(plugin: Any, graph: GraphParts, num_parts: int) -> Mapping[Any, PartitionBook]:
    """The plugin's parts of the graph's homogeneous view, as a book per
    node type (``None``: a homogeneous graph's one)."""
    whole = _run_plugin(plugin, graph.partition_input(), num_parts)
    if graph.node_types == [None]:
        return {None: whole}
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


def _write_parts(tmp: Path, graph: GraphParts, books: Mapping[Any, PartitionBook],
                 record: Callable[[str], str], bar: Any) -> dict[str, Any]:
    """Writes the books and every part into ``tmp``, one part at a time; a
    homogeneous graph as the one-type case (node and edge type ``None``:
    format version 1, whose file names and ``meta.json`` entries are those
    of its one type), a heterogeneous one as version 2.

    Per node type a book and per part a node file; per edge type and part
    the CSC of the owned destinations' incoming edges, stored at the part
    that owns the destination. Ids are per type: ``indices`` are source ids
    of the source type, ``edge_ids`` columns of that edge type's
    ``edge_index``.

    Args:
        tmp: The (temporary) dataset directory.
        graph: The validated graph.
        books: Per node type, its owner of every node.
        record: Checksums a written file (name relative to ``tmp``) and
            returns its name.
        bar: A tqdm bar, advanced once per part.

    Returns:
        ``meta.json``'s content, without the partitioner and graph name.
    """
    hetero = graph.node_types != [None]
    num_parts = next(iter(books.values())).num_parts
    book_entries = []
    for node_type in graph.node_types:
        name = book_file(node_type)
        save_tensors(tmp / name, {BOOK_KEY: books[node_type].to_tensor()})
        book_entries.append({"type": node_type, "file": record(name), "key": BOOK_KEY,
                             "dtype": dtype_name(books[node_type].to_tensor().dtype)})
    splitters = {}
    for et, ei in graph.edge_index.items():
        src, dst = edge_ends(et)
        splitters[et] = GraphSplitter(books[dst].to_tensor(), num_parts, ei,
                                      src_part=books[src].to_tensor())
    parts = [_write_part(tmp, graph, books, splitters, k, record, bar)
             for k in range(num_parts)]
    meta = {
        "format": FORMAT_NAME,
        "format_version": HETERO_FORMAT_VERSION if hetero else FORMAT_VERSION,
        "num_parts": num_parts, "num_nodes": graph.total_nodes,
        "num_edges": graph.total_edges, "is_hetero": hetero,
        "node_types": [{"type": t, "num_nodes": graph.num_nodes[t],
                        "features": feature_specs(graph.node_features[t])}
                       for t in graph.node_types],
        "edge_types": [{"type": None if et is None else list(et),
                        "src": edge_ends(et)[0], "dst": edge_ends(et)[1],
                        "num_edges": graph.num_edges(et),
                        "features": feature_specs(graph.edge_features[et])}
                       for et in graph.edge_types],
        "books": book_entries, "parts": parts if hetero else one_type_parts(parts),
        "stats": summarize([PartStats(**p["stats"]) for p in parts], graph.total_nodes,
                           graph.total_edges),
    }
    if hetero:
        for entry in meta["node_types"]:
            entry["balance"] = balance(books[entry["type"]].counts().tolist())
        for i, entry in enumerate(meta["edge_types"]):
            entry["edge_cut"] = sum(p["edge_types"][i]["num_cut_edges"] for p in parts)
            entry["balance"] = balance([p["edge_types"][i]["num_edges"] for p in parts])
    return meta


def _write_part(tmp: Path, graph: GraphParts, books: Mapping[Any, PartitionBook],
                splitters: dict[Any, GraphSplitter], k: int, record: Callable[[str], str],
                bar: Any) -> dict[str, Any]:
    """Writes part ``k``'s edge and node files; returns its ``meta.json`` entry."""
    bar.set_postfix_str(f"writing part {k}")
    (tmp / part_dir(k)).mkdir()
    owned = {t: books[t].owned(k) for t in graph.node_types}
    halo: dict[Any, list[Tensor]] = {t: [] for t in graph.node_types}
    edge_entries = []
    for et, splitter in splitters.items():
        src, dst = edge_ends(et)
        topo = splitter.topology(k, owned[dst].numel())
        foreign = splitter.foreign(k, topo["indices"])
        halo[src].append(foreign)
        name = edge_file(k, et)
        save_tensors(tmp / name, edge_tensors(topo, graph.edge_features[et]))
        edge_entries.append({"type": None if et is None else list(et), "file": record(name),
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
    bar.update(1)
    return {"part": k, "dir": part_dir(k), "node_types": node_entries,
            "edge_types": edge_entries,
            "stats": PartStats.of_entries(node_entries, edge_entries).to_json()}


def _is_mask(mask: Any) -> bool:
    return isinstance(mask, Tensor) and mask.dtype == torch.bool and mask.dim() == 1
