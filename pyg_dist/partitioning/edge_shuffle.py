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
        """The shuffle pass: every edge into its owner's spill file."""
        outs = self.open_spills()
        try:
            for first, src, dst in self.edges.chunks(chunk_edges):
                records, bounds = self.group(first, src, dst, self.dst_part[dst])
                for k in np.flatnonzero(bounds[1:] > bounds[:-1]):
                    outs[k].write(records[bounds[k]:bounds[k + 1]].tobytes())
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

    def write_part(self, tmp: Path, part: int, owned: np.ndarray, halo: np.ndarray,
                   budget_edges: int, bar: Any, by_edge_id: bool = False) -> PartStats:
        """Writes the part's edge file of this type from its spill file.

        Args:
            tmp: The staging directory.
            part: K.
            owned: The part's destination-type node ids, sorted.
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
        counts = np.zeros(owned.size, dtype=np.int64)
        cut = 0
        for records in self._chunks(spill, chunk):
            counts += np.bincount(np.searchsorted(owned, records["dst"]), minlength=owned.size)
            src = records["src"]
            foreign = src[self.src_part[src] != part]
            cut += foreign.size
            halo[foreign] = True
            del records, src, foreign
        indptr = np.zeros(owned.size + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        del counts
        specs = {INDPTR: (np.dtype(np.int64), (owned.size + 1,)),
                 INDICES: (np.dtype(np.int64), (num_edges,)),
                 EDGE_IDS: (np.dtype(np.int64), (num_edges,))}
        for name, array in self.edges.arrays.items():
            specs[name] = (array.dtype, (num_edges, *array.shape[1:]))
        with SafetensorsFile(tmp / self.file_name(part), specs) as out:
            out.write_rows(INDPTR, 0, indptr)
            for bucket_path, first_edge in self._buckets(spill, owned, indptr, chunk):
                records = np.fromfile(bucket_path, dtype=self.record)
                if bucket_path != spill:
                    bucket_path.unlink()
                local = np.searchsorted(owned, records["dst"])
                order = np.lexsort((records["eid"], local)) if by_edge_id else \
                    np.argsort(local, kind="stable")
                del local
                out.write_rows(INDICES, first_edge, records["src"][order])
                out.write_rows(EDGE_IDS, first_edge, records["eid"][order])
                for name in self.edges.arrays:
                    out.write_rows(name, first_edge, records[ATTRIBUTE_FIELD + name][order])
                bar.update(len(records))
                del records, order
        spill.unlink()
        return PartStats(num_nodes=int(owned.size), num_edges=num_edges,
                         num_halo_nodes=0, num_cut_edges=cut)

    def _buckets(self, spill: Path, owned: np.ndarray, indptr: np.ndarray,
                 chunk: int) -> Iterator[tuple[Path, int]]:
        """``(file, first edge)`` of destination-range buckets of at most
        ``chunk`` edges each (one bucket: the spill file itself)."""
        if int(indptr[-1]) <= chunk:
            yield spill, 0
            return
        # Bucket b holds local destinations [cuts[b], cuts[b + 1]); a single
        # destination with more than `chunk` edges gets a bucket of its own.
        cuts = [0]
        while cuts[-1] < owned.size:
            limit = indptr[cuts[-1]] + chunk
            nxt = int(np.searchsorted(indptr, limit, side="right")) - 1
            cuts.append(min(owned.size, max(nxt, cuts[-1] + 1)))
        cuts_arr = np.asarray(cuts, dtype=np.int64)
        paths = [spill.with_suffix(f".b{b}") for b in range(len(cuts) - 1)]
        outs = [open(p, "wb") for p in paths]
        try:
            for records in self._chunks(spill, chunk):
                local = np.searchsorted(owned, records["dst"])
                bucket = np.searchsorted(cuts_arr, local, side="right") - 1
                order = np.argsort(bucket, kind="stable")
                bounds = np.zeros(len(paths) + 1, dtype=np.int64)
                np.cumsum(np.bincount(bucket, minlength=len(paths)), out=bounds[1:])
                grouped = records[order]
                for b in np.flatnonzero(bounds[1:] > bounds[:-1]):
                    outs[b].write(grouped[bounds[b]:bounds[b + 1]].tobytes())
                del local, bucket, order, grouped, records
        finally:
            for f in outs:
                f.close()
        for b, path in enumerate(paths):
            yield path, int(indptr[cuts[b]])
