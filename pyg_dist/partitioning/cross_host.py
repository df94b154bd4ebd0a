"""Partitioning from files across the ranks of a ``torchrun`` job
(``pyg-dist partition --from DIR ROOT --distributed``).

Every rank of an initialized ``torch.distributed`` group (gloo) runs
:func:`partition_files_across_ranks` on the same input (a shared file system,
or a copy per host) and writes the parts it will serve: part ``k`` belongs to
rank ``k % world_size``.

1. **assign**: a partitioner that sets ``assigns_across_ranks`` (``hash``,
   ``random``, ``streaming``) runs on every rank, each streaming its range of
   the edge files and exchanging what it places every few thousand nodes;
   others run on rank 0 (as one host would), which broadcasts the book.
2. **nodes**: rank ``r`` reads the ``r``-th range of node ids in windows and
   sends every owned row, with its node id and its row in the owner's node
   file, to the rank that writes that part (``all_to_all_single``).
3. **shuffle**: rank ``r`` reads the ``r``-th range of parquet files in chunks
   and sends every edge record (ids and attribute rows) to the rank of its
   destination's part, which appends it to that part's spill file.
4. **csc**: each rank builds its parts' CSC from their spill files, ordering
   every destination's edges by edge id (records arrive in no edge order),
   which is the input order one host keeps.

The ranks then exchange their parts' ``meta.json`` entries and checksums, so
the dataset is the one :func:`~pyg_dist.partitioning.out_of_core.partition_files`
writes on one host, file for file and byte for byte. Ranks that share a file
system write into one staging directory (the first to create a probe file
beside ROOT leads: it writes the books and ``meta.json`` and renames the
directory onto ROOT); a host with a file system of its own gets its parts,
the books and ``meta.json`` (``PartitionReader(root, parts=[...])`` and
``pyg-dist serve --part`` need no more).

Messages between ranks are this module's own byte layout, checked on
receipt (a part the receiver does not write, rows past a file's end) before
anything is written. A rank that fails stops every rank within seconds, and
their errors name it (:mod:`~pyg_dist.partitioning.rank_failure`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
import torch.distributed as dist

from pyg_dist.errors import InvalidPartitionArgumentError, PartitionError
from pyg_dist.partitioning.dataset_dir import (
    build_partitioner,
    check_num_parts,
    check_root,
    partitioner_record,
    staged,
    staging_dir,
)
from pyg_dist.partitioning.edge_shuffle import EdgeShuffle
from pyg_dist.partitioning.file_names import node_file
from pyg_dist.partitioning.file_parts import OneHost, write_parts
from pyg_dist.partitioning.file_source import EdgeStream, FileGraph, NodeSet
from pyg_dist.partitioning.memory_limit import (
    bounded_allocation,
    current_rss,
    default_limit,
    release_freed_memory,
)
from pyg_dist.partitioning.node_slices import (
    open_node_file,
    window_by_part,
    write_node_rows,
)
from pyg_dist.partitioning.out_of_core import (
    ASSIGN_BYTES_PER_EDGE,
    assign_parts,
    book_dtype,
    working_budget,
)
from pyg_dist.partitioning.peer_watch import DEFAULT_TIMEOUT_S
from pyg_dist.partitioning.rank_failure import RankFailureGuard
from pyg_dist.partitioning.rank_messages import (
    agree_min,
    any_rank,
    exchange,
    gather_arrays,
    gather_json,
)
from pyg_dist.partitioning.safetensors_stream import SafetensorsFile
from pyg_dist.plugins import PluginRegistry, default_registry

logger = logging.getLogger(__name__)


def partition_files_across_ranks(
        source: Union[str, os.PathLike], num_parts: int, root: Union[str, os.PathLike],
        partitioner: str = "hash", *, memory_limit: Optional[int] = None,
        chunk_edges: Optional[int] = None, overwrite: bool = False,
        registry: Optional[PluginRegistry] = None, progress: bool = False,
        graph_name: Optional[str] = None, peer_timeout: float = DEFAULT_TIMEOUT_S,
        **options: Any) -> dict[str, Any]:
    """Partitions the graph in ``source`` with every rank of the default
    process group; each rank writes the parts ``k`` with ``k % world_size ==
    rank``. Called by every rank with the same arguments.

    Args:
        source: The input directory, readable by every rank.
        num_parts: Number of parts.
        root: The dataset directory to create (on each host's file system).
        partitioner: A partitioner plugin: on every rank if it sets
            ``assigns_across_ranks``, else on rank 0 as one host would.
        memory_limit: Bytes each rank's process may hold at its peak.
        chunk_edges: At most this many edges (or nodes) per chunk.
        overwrite: Replace a non-empty ``root``.
        registry: Plugin registry (default: the installed plugins).
        progress: Show a tqdm bar per pass on rank 0.
        graph_name: Name recorded in ``meta.json``.
        peer_timeout: Seconds without a sign of life from another rank (or
            from the job's store) after which this rank removes what it
            staged and ends its process with status 75
            (:mod:`~pyg_dist.partitioning.peer_watch`).
        **options: The partitioner's options.

    Returns:
        The ``meta.json`` written (the same on every rank).

    A rank that fails stops every rank within seconds, each raising an error
    that names it (:mod:`~pyg_dist.partitioning.rank_failure`); the process
    group is then destroyed on every rank. For the run's duration SIGTERM
    raises in the main thread (so that the failure path runs); the previous
    handler is restored after.

    Raises:
        InvalidPartitionArgumentError: no process group, ``peer_timeout`` not
            a positive number of seconds, or as
            :func:`~pyg_dist.partitioning.out_of_core.partition_files`.
        PartitionMemoryError, PluginNotFoundError, PartitionError: as
            :func:`~pyg_dist.partitioning.out_of_core.partition_files`.
    """
    if not peer_timeout > 0:
        raise InvalidPartitionArgumentError(
            f"peer_timeout must be a number of seconds > 0, got {peer_timeout!r}")
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidPartitionArgumentError(
            "partitioning across ranks needs an initialized torch.distributed process group "
            "(run under torchrun; pyg-dist partition --distributed initializes gloo)")
    with RankFailureGuard(_run_token(), peer_timeout) as guard:
        graph = FileGraph.open(source)
        root = Path(root)
        check_num_parts(num_parts, graph.num_nodes)
        _check_agreement(num_parts, graph)
        registry = registry or default_registry
        plugin = build_partitioner(registry, partitioner, options, ("assign_stream", "assign"))
        with bounded_allocation():
            graph.warm_up()
            release_freed_memory()
            limit = default_limit() if memory_limit is None else int(memory_limit)
            budget = working_budget(limit, current_rss(), graph, num_parts,
                                    max_part_nodes=-(-graph.num_nodes // num_parts),
                                    cap=chunk_edges)
            node_part = _assign_book(plugin, graph, num_parts, budget, guard)
            with _shared_staging(root, overwrite, guard) as (tmp, leader):
                meta = write_parts(tmp, graph, node_part, num_parts, budget,
                                   progress and dist.get_rank() == 0,
                                   {"graph_name": graph_name, "partitioner":
                                    partitioner_record(registry, partitioner, plugin)},
                                   _Ranks(leader))
                dist.barrier()  # every rank of this file system has written its parts
            # A leader whose rename failed fails every rank (other hosts' ROOTs
            # are in place by then: a rename cannot be taken back).
            dist.barrier()
    return meta


def _run_token() -> str:
    """A random name of this run, the same on every rank (rank 0's): names
    the staging directory and the failure reports in the store."""
    token = torch.empty(16, dtype=torch.uint8)
    if dist.get_rank() == 0:
        token = torch.frombuffer(bytearray(uuid.uuid4().bytes), dtype=torch.uint8)
    dist.broadcast(token, src=0)
    return bytes(token.tolist()).hex()[:12]


def _assign_book(plugin: Any, graph: FileGraph, num_parts: int, budget: Any,
                 guard: RankFailureGuard) -> np.ndarray:
    """The owner of every node, the same on every rank.

    A plugin that sets ``assigns_across_ranks`` runs on every rank, with its
    rank's share of the edges and an all-gather
    (:class:`~pyg_dist.partitioning.file_source.EdgeStream`); the books it
    returns are compared (a digest) before anything is written. Others run
    on rank 0, as one host would, and the book is broadcast.

    Raises:
        PartitionError: the ranks' books differ.
    """
    if getattr(plugin, "assigns_across_ranks", False) is True and callable(
            getattr(plugin, "assign_stream", None)):
        # A round's placements (16 bytes a node, a few thousand nodes from each
        # rank) are small beside a chunk: the chunk is one host's.
        chunk = agree_min(budget.chunk_rows(ASSIGN_BYTES_PER_EDGE))
        logger.info("assigning with %s on every rank, chunks of %d edges",
                    type(plugin).__name__, chunk)
        stream = EdgeStream(graph, chunk, dist.get_rank(), dist.get_world_size(), gather_arrays)
        node_part = assign_parts(plugin, graph, num_parts, chunk, budget.limit, stream)
        _check_same_book(node_part, type(plugin).__name__)
    else:
        if dist.get_rank() == 0:
            with guard.busy():  # a plugin may hold the GIL (pymetis does)
                node_part = assign_parts(plugin, graph, num_parts,
                                         budget.chunk_rows(ASSIGN_BYTES_PER_EDGE),
                                         budget.limit)
        else:
            node_part = np.empty(graph.num_nodes, dtype=book_dtype(num_parts))
        dist.broadcast(torch.from_numpy(node_part), src=0)
    release_freed_memory()
    return node_part


def _check_same_book(node_part: np.ndarray, name: str) -> None:
    """Every rank must hold the same book: a plugin that assigns across
    ranks must return it the same on every rank.

    Raises:
        PartitionError: naming the plugin.
    """
    digest = hashlib.blake2b(np.ascontiguousarray(node_part).data, digest_size=7).digest()
    if _disagreement([int.from_bytes(digest, "little")]) is not None:
        raise PartitionError(
            f"the partitioner {name} returned different parts on the ranks of this job; a "
            f"plugin that sets assigns_across_ranks must return the same parts on every rank "
            f"(docs/plugins.md, 'Across ranks')")


@contextlib.contextmanager
def _shared_staging(root: Path, overwrite: bool,
                    guard: RankFailureGuard) -> Iterator[tuple[Path, bool]]:
    """The staging directory of this rank's file system and whether this rank
    leads it (made it; writes the books and ``meta.json``; renames it).

    On an error the other ranks are told first (``guard``), then every rank
    removes the directory: a rank that does not lead may have made its spill
    directories after the leader removed it."""
    name = guard.token
    root.parent.mkdir(parents=True, exist_ok=True)
    probe = root.parent / f".{root.name}.probe-{name}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        leader = True
    except FileExistsError:
        leader = False
    tmp = staging_dir(root, name)
    # The probe is named by this run's token: any rank may remove it once the
    # run failed (the leader may be the rank that vanished).
    guard.on_abort(lambda: shutil.rmtree(tmp, ignore_errors=True))
    guard.on_abort(lambda: probe.unlink(missing_ok=True))
    try:
        if leader:
            check_root(root, overwrite)
        dist.barrier()
        if leader:
            with staged(root, name) as tmp:
                try:
                    dist.barrier()  # the directory exists for the other ranks
                    yield tmp, True
                except BaseException as exc:
                    guard.report(exc)  # before staged() removes the directory
                    raise
        else:
            dist.barrier()
            if not tmp.is_dir():
                raise PartitionError(f"{tmp} did not appear; the ranks sharing this file "
                                     f"system could not stage {root}")
            yield tmp, False
    except BaseException as exc:
        guard.report(exc)
        if not leader:
            shutil.rmtree(tmp, ignore_errors=True)
        probe.unlink(missing_ok=True)  # also when the leader was killed
        raise
    finally:
        if leader:
            probe.unlink(missing_ok=True)


def _check_agreement(num_parts: int, graph: FileGraph) -> None:
    """Every rank must partition the same graph into as many parts: the
    rounds and messages below assume it.

    Raises:
        InvalidPartitionArgumentError: naming what the ranks disagree on.
    """
    spread = _disagreement([num_parts, graph.num_nodes, graph.num_edges, len(graph.nodes),
                            len(graph.edges)])
    if spread is not None:
        raise InvalidPartitionArgumentError(
            f"the ranks disagree on (num_parts, nodes, edges, node types, edge types): "
            f"from {spread[0]} to {spread[1]}; give every rank the same "
            f"arguments and the same files")


def _disagreement(values: list[int]) -> Optional[tuple[list[int], list[int]]]:
    """``None`` when every rank holds the same ``values`` (int64s), else
    their smallest and largest, entry by entry (one all-reduce each)."""
    low = torch.tensor(values, dtype=torch.int64)
    high = low.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return None if torch.equal(low, high) else (low.tolist(), high.tolist())


def _round_share() -> float:
    """The share of the working memory one rank's window or chunk may take:
    a round holds what this rank sends, what every rank sends it (about as
    much, spread over the ranks), the joined payload and gloo's own copies
    of both (measured: with a share of 1 / ranks, two ranks peaked 3.4% over
    a 1 GiB limit)."""
    return 1 / (2 * dist.get_world_size())


def _my_parts(num_parts: int) -> list[int]:
    return list(range(dist.get_rank(), num_parts, dist.get_world_size()))


class _Ranks(OneHost):
    """The passes across the ranks: each rank reads its range of the input
    and sends every row to the rank that writes its part (``k % world``);
    windows and chunks are the smallest any rank can take."""

    by_edge_id = True  # records arrive from every rank, in no edge order

    def __init__(self, leader: bool) -> None:
        self.leads = leader
        self.spill_name = f".spill-{dist.get_rank()}"
        self.share = _round_share()

    def parts(self, num_parts: int) -> list[int]:
        return _my_parts(num_parts)

    def rows(self, count: int) -> int:
        return agree_min(count)

    def nodes(self, tmp: Path, key: Any, nodes: NodeSet, book: np.ndarray, num_parts: int,
              window: int, bar: Any) -> dict[int, int]:
        return _exchange_nodes(tmp, key, nodes, book, num_parts, window, bar)

    def edges(self, shuffle: EdgeShuffle, chunk: int, bar: Any) -> None:
        _exchange_edges(shuffle, chunk, _my_parts(shuffle.num_parts), bar)

    def gather(self, entries: list[dict[str, Any]], files: dict[str, Any]
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return _merge(gather_json({"entries": entries, "files": files}))


def _exchange_nodes(tmp: Path, key: Any, nodes: NodeSet, book: np.ndarray, num_parts: int,
                    window: int, bar: Any) -> dict[int, int]:
    """Sends every node row of this rank's id range to its part's rank and
    writes the rows other ranks send into this rank's node files; returns
    the training nodes of this rank's parts."""
    rank, world = dist.get_rank(), dist.get_world_size()
    counts = np.bincount(book, minlength=num_parts)
    lo, hi = nodes.num_nodes * rank // world, nodes.num_nodes * (rank + 1) // world
    cursor = np.zeros(num_parts, dtype=np.int64)  # rows of each part below `lo`
    for s in range(0, lo, 1 << 20):
        cursor += np.bincount(book[s:min(lo, s + (1 << 20))], minlength=num_parts)
    files = {}
    train = {}
    try:
        for k in _my_parts(num_parts):
            files[k] = open_node_file(tmp / node_file(k, key), nodes, int(counts[k]))
            train[k] = 0
        start = lo
        while any_rank(start < hi):
            stop = min(start + window, hi)
            outgoing: list[list[Any]] = [[] for _ in range(world)]
            if start < stop:
                for k, ids, rows in window_by_part(nodes, book, num_parts, start, stop):
                    piece = outgoing[k % world]
                    piece.append(np.array([k, cursor[k], ids.size], dtype=np.int64))
                    piece.append(ids)
                    piece += [np.ascontiguousarray(rows[name]) for name in nodes.arrays]
                    cursor[k] += ids.size
                bar.update(stop - start)
            for blob in exchange(outgoing):
                _write_node_rows(blob, files, nodes.arrays, counts, train)
            start = max(stop, start)
    finally:
        for f in files.values():
            f.close()
    return train


def _write_node_rows(blob: memoryview, files: dict[int, SafetensorsFile],
                     arrays: dict[str, Any], counts: np.ndarray, train: dict[int, int]) -> None:
    at = 0
    while at < len(blob):
        k, first, n = (int(v) for v in np.frombuffer(blob, np.int64, 3, at))
        at += 24
        if k not in files or first < 0 or n < 0 or first + n > counts[k]:
            raise PartitionError(f"a rank sent node rows {first}+{n} of part {k}, which this "
                                 f"rank does not write or which do not fit it")
        ids = np.frombuffer(blob, np.int64, n, at)
        at += 8 * n
        rows = {}
        for name, array in arrays.items():
            size = n * array.row_bytes
            rows[name] = np.frombuffer(blob[at:at + size], array.dtype).reshape(n, *array.shape[1:])
            at += size
        train[k] += write_node_rows(files[k], first, ids, rows)


def _exchange_edges(shuffle: EdgeShuffle, chunk: int, mine: list[int], bar: Any) -> None:
    """Sends every edge of this rank's range of files to its part's rank and
    appends what the others send to this rank's spill files."""
    rank, world = dist.get_rank(), dist.get_world_size()
    num_files = len(shuffle.edges.files)
    files = range(num_files * rank // world, num_files * (rank + 1) // world)
    chunks = shuffle.edges.chunks(chunk, files)
    outs = shuffle.open_spills(mine)
    itemsize = shuffle.record.itemsize
    try:
        item = next(chunks, None)
        while any_rank(item is not None):
            outgoing: list[list[Any]] = [[] for _ in range(world)]
            if item is not None:
                first, src, dst = item
                records, bounds = shuffle.group(first, src, dst, shuffle.dst_part[dst])
                for k in np.flatnonzero(bounds[1:] > bounds[:-1]):
                    outgoing[k % world] += [np.array([k, bounds[k + 1] - bounds[k]], np.int64),
                                            records[bounds[k]:bounds[k + 1]].view(np.uint8)]
                bar.update(src.size)
                del src, dst
            for blob in exchange(outgoing):
                at = 0
                while at < len(blob):
                    k, n = (int(v) for v in np.frombuffer(blob, np.int64, 2, at))
                    at += 16
                    if k not in outs or n < 0 or at + n * itemsize > len(blob):
                        raise PartitionError(f"a rank sent {n} edges of part {k}, which this "
                                             f"rank does not write")
                    outs[k].write(blob[at:at + n * itemsize])
                    shuffle.num_edges[k] += n
                    at += n * itemsize
            item = next(chunks, None)
    finally:
        for f in outs.values():
            f.close()


def _merge(values: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every rank's part entries (in part order) and file checksums, joined."""
    entries, files = [], {}
    for value in values:
        entries += value["entries"]
        files.update(value["files"])
    return sorted(entries, key=lambda e: e["part"]), files
