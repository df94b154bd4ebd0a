"""Edges to their owners and each part's CSC, in bounded memory.

An edge is stored by the part owning its destination. Two steps, per edge
type:

1. **Shuffle** (:meth:`EdgeShuffle.spill`): one pass over the edge chunks;
   each chunk is grouped by the owner of its destinations (stable, so edge id
   order survives) and appended to that part's spill file as records of
   ``(src, dst, edge id)`` int64 and the edge's attribute rows.
2. **CSC** (:meth:`EdgeShuffle.write_part`): per part, a pass over its spill
   file counts the edges of every owned destination (the ``indptr``) and the
   cut edges, and marks the halo nodes. If the part's edges fit the working
   memory they are sorted at once; otherwise they are split by destination
   range into buckets that each fit (a second spill), and each bucket is
   sorted in turn and written at its place. The sort is stable, so within a
   destination edges keep their input order: the same CSC, and the same edge
   attributes in CSC order, as the in-memory writer makes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np

from pyg_dist.partitioning.file_arrays import EdgeSet
from pyg_dist.partitioning.file_names import EDGE_IDS, INDICES, INDPTR, part_dir
from pyg_dist.partitioning.radix_order import stable_order
from pyg_dist.partitioning.safetensors_stream import SafetensorsFile
from pyg_dist.partitioning.stats import PartStats

ATTRIBUTE_FIELD = "attr:"
"""Prefix of an edge attribute's field in a spill record (apart from src,
dst, eid whatever the attribute's name)."""


def shuffle_bytes_per_edge(attribute_bytes: int) -> int:
    """Bytes per edge of a shuffle chunk in flight: pyarrow's columns, their
    int64 copies, the owner and sort order, the spilled records (128), and
    the attribute rows read, gathered and spilled (3 times their bytes)."""
    return 128 + 3 * attribute_bytes


def sort_bytes_per_edge(attribute_bytes: int) -> int:
    """Bytes per edge while a bucket is sorted: the records, the
    destinations' local rows, the sort order and the gathered outputs (96
    without attributes; each attribute row is read once and gathered once,
    with room for the bucket split's regrouped copy)."""
    return 96 + 3 * attribute_bytes


def edge_file_name(part: int) -> str:
    """A homogeneous part's edge file, relative to ROOT."""
    return f"{part_dir(part)}/edges.safetensors"


def record_dtype(edges: EdgeSet) -> np.dtype:
    """The spill record of one edge: ids, then every attribute's row."""
    fields: list[Any] = [("src", "<i8"), ("dst", "<i8"), ("eid", "<i8")]
    fields += [(ATTRIBUTE_FIELD + name, a.dtype, a.shape[1:]) for name, a in edges.arrays.items()]
    return np.dtype(fields)


class EdgeShuffle:
    """Spill files of one edge type, in ``spill_dir`` (removed by the caller).

    Args:
        spill_dir: An empty directory on the output's file system.
        edges: The edge type's files.
        dst_part: Owner of every destination node.
        num_parts: K.
        src_part: Owner of every source node (``None``: ``dst_part``, one
            node type).
        file_name: Part -> its edge file of this type, relative to ROOT.
    """

    def __init__(self, spill_dir: Path, edges: EdgeSet, dst_part: np.ndarray, num_parts: int,
                 src_part: Optional[np.ndarray] = None,
                 file_name: Callable[[int], str] = edge_file_name) -> None:
        self.spill_dir = spill_dir
        self.edges = edges
        self.dst_part = dst_part
        self.src_part = dst_part if src_part is None else src_part
        self.num_parts = num_parts
        self.file_name = file_name
        self.record = record_dtype(edges)
        self.num_edges = np.zeros(num_parts, dtype=np.int64)

    def _spill(self, part: int) -> Path:
        return self.spill_dir / f"part-{part}.edges"

    def spill(self, chunk_edges: int, bar: Any) -> None:
        """The shuffle pass: every edge into its owner's spill file (each
        run of records written from the chunk itself: ``tobytes`` would copy
        it first)."""
        outs = self.open_spills()
        try:
            for first, src, dst in self.edges.chunks(chunk_edges):
                records, bounds = self.group(first, src, dst, self.dst_part[dst])
                for k in np.flatnonzero(bounds[1:] > bounds[:-1]):
                    outs[k].write(records[bounds[k]:bounds[k + 1]].view(np.uint8))
                self.num_edges += bounds[1:] - bounds[:-1]
                bar.update(src.size)
                del records
        finally:
            for f in outs.values():
                f.close()

    def open_spills(self, parts: Optional[list[int]] = None) -> dict[int, Any]:
        """The spill files of ``parts`` (all), opened for appending."""
        return {k: open(self._spill(k), "ab")
                for k in (range(self.num_parts) if parts is None else parts)}

    def group(self, first: int, src: np.ndarray, dst: np.ndarray,
              key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's records (edge ids from ``first``), sorted stably by
        ``key`` (an integer in ``[0, num_parts)`` per edge), and the bounds
        of every key's run."""
        order = np.argsort(key, kind="stable")
        bounds = np.zeros(self.num_parts + 1, dtype=np.int64)
        np.cumsum(np.bincount(key, minlength=self.num_parts), out=bounds[1:])
        records = np.empty(src.size, dtype=self.record)
        records["src"] = src[order]
        records["dst"] = dst[order]
        records["eid"] = order
        records["eid"] += first
        for name, array in self.edges.arrays.items():
            records[ATTRIBUTE_FIELD + name] = array.read_rows(first, first + src.size)[order]
        return records, bounds

    def _chunks(self, path: Path, chunk_edges: int) -> Iterator[np.ndarray]:
        """Records of a spill file, ``chunk_edges`` at a time."""
        total = os.path.getsize(path) // self.record.itemsize
        with open(path, "rb") as f:
            for start in range(0, total, chunk_edges):
                count = min(chunk_edges, total - start)
                yield np.fromfile(f, dtype=self.record, count=count)

    def write_part(self, tmp: Path, part: int, rows: np.ndarray, num_owned: int,
                   halo: np.ndarray, budget_edges: int, bar: Any,
                   by_edge_id: bool = False) -> PartStats:
        """Writes the part's edge file of this type from its spill file.

        Args:
            tmp: The staging directory.
            part: K.
            rows: The row of every destination-type node in its part
                (:func:`~pyg_dist.partitioning.node_slices.part_rows`): the
                column of its edges in the part's CSC.
            num_owned: The part's destination-type nodes.
            halo: A bool array over the source type's nodes: the sources
                owned by other parts are set (the caller counts and clears).
            budget_edges: Edges that may be sorted at once.
            bar: A tqdm bar advanced by edges.
            by_edge_id: Order each destination's edges by edge id (spill
                files filled by several ranks, in no edge order); otherwise
                the spill order is kept (it is the edge order).

        Returns:
            The part's counts of this edge type (``num_halo_nodes`` is left
            0: the halo is counted over all edge types by the caller).
        """
        spill = self._spill(part)
        num_edges = int(self.num_edges[part])
        chunk = max(1, budget_edges)
        specs = {INDPTR: (np.dtype(np.int64), (num_owned + 1,)),
                 INDICES: (np.dtype(np.int64), (num_edges,)),
                 EDGE_IDS: (np.dtype(np.int64), (num_edges,))}
        for name, array in self.edges.arrays.items():
            specs[name] = (array.dtype, (num_edges, *array.shape[1:]))
        with SafetensorsFile(tmp / self.file_name(part), specs) as out:
            if num_edges <= chunk:  # one read: count, mark and sort at once
                records = np.fromfile(spill, dtype=self.record)
                local = rows[records["dst"]]
                indptr = _indptr(np.bincount(local, minlength=num_owned))
                cut = self._mark_halo(records["src"], part, halo)
                out.write_rows(INDPTR, 0, indptr)
                self._write_sorted(out, records, local, num_owned, 0, by_edge_id)
                bar.update(num_edges)
                del records, local
            else:
                indptr, cut = self._count(spill, part, rows, num_owned, halo, chunk)
                out.write_rows(INDPTR, 0, indptr)
                for path, first_edge in self._buckets(spill, rows, indptr, chunk):
                    records = np.fromfile(path, dtype=self.record)
                    path.unlink()
                    self._write_sorted(out, records, rows[records["dst"]], num_owned,
                                       first_edge, by_edge_id)
                    bar.update(len(records))
                    del records
        spill.unlink()
        return PartStats(num_nodes=int(num_owned), num_edges=num_edges,
                         num_halo_nodes=0, num_cut_edges=cut)

    def _mark_halo(self, src: np.ndarray, part: int, halo: np.ndarray) -> int:
        """Sets the sources owned by other parts in ``halo``; their edges (cut)."""
        foreign = src[self.src_part[src] != part]
        halo[foreign] = True
        return int(foreign.size)

    def _count(self, spill: Path, part: int, rows: np.ndarray, num_owned: int,
               halo: np.ndarray, chunk: int) -> tuple[np.ndarray, int]:
        """A pass over a spill file too big to sort at once: its ``indptr``
        and cut edges (the halo marked)."""
        counts = np.zeros(num_owned, dtype=np.int64)
        cut = 0
        for records in self._chunks(spill, chunk):
            counts += np.bincount(rows[records["dst"]], minlength=num_owned)
            cut += self._mark_halo(records["src"], part, halo)
            del records
        return _indptr(counts), cut

    def _write_sorted(self, out: SafetensorsFile, records: np.ndarray, local: np.ndarray,
                      num_owned: int, first_edge: int, by_edge_id: bool) -> None:
        """Writes ``records`` (whole destinations, from ``first_edge`` on) in
        CSC order: by destination row ``local``, stably (or by edge id)."""
        order = None
        if by_edge_id:
            order = stable_order(records["eid"], self.edges.num_edges)
        order = stable_order(local, num_owned, order)
        del local
        # Gathering from a contiguous copy of a field is about 4x faster
        # than from the strided field of the records.
        out.write_rows(INDICES, first_edge, np.ascontiguousarray(records["src"])[order])
        out.write_rows(EDGE_IDS, first_edge, np.ascontiguousarray(records["eid"])[order])
        for name in self.edges.arrays:
            out.write_rows(name, first_edge, records[ATTRIBUTE_FIELD + name][order])

    def _buckets(self, spill: Path, rows: np.ndarray, indptr: np.ndarray,
                 chunk: int) -> Iterator[tuple[Path, int]]:
        """``(file, first edge)`` of destination-range buckets of at most
        ``chunk`` edges each, split from the spill file (removed by the
        caller as it reads them)."""
        num_owned = indptr.size - 1
        # Bucket b holds local destinations [cuts[b], cuts[b + 1]); a single
        # destination with more than `chunk` edges gets a bucket of its own.
        cuts = [0]
        while cuts[-1] < num_owned:
            limit = indptr[cuts[-1]] + chunk
            nxt = int(np.searchsorted(indptr, limit, side="right")) - 1
            cuts.append(min(num_owned, max(nxt, cuts[-1] + 1)))
        cuts_arr = np.asarray(cuts, dtype=np.int64)
        paths = [spill.with_suffix(f".b{b}") for b in range(len(cuts) - 1)]
        outs = [open(p, "wb") for p in paths]
        try:
            for records in self._chunks(spill, chunk):
                bucket = np.searchsorted(cuts_arr, rows[records["dst"]], side="right") - 1
                order = np.argsort(bucket, kind="stable")
                bounds = np.zeros(len(paths) + 1, dtype=np.int64)
                np.cumsum(np.bincount(bucket, minlength=len(paths)), out=bounds[1:])
                grouped = records[order]
                for b in np.flatnonzero(bounds[1:] > bounds[:-1]):
                    outs[b].write(grouped[bounds[b]:bounds[b + 1]].view(np.uint8))
                del bucket, order, grouped, records
        finally:
            for f in outs:
                f.close()
        for b, path in enumerate(paths):
            yield path, int(indptr[cuts[b]])


def _indptr(counts: np.ndarray) -> np.ndarray:
    """The CSC ``indptr`` of per-destination edge counts."""
    indptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr
