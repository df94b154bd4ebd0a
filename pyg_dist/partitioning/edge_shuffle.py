"""Edges to their owners and each part's CSC, in bounded memory.

An edge is stored by the part owning its destination. Two steps:

1. **Shuffle** (:meth:`EdgeShuffle.spill`): one pass over the edge chunks;
   each chunk is grouped by the owner of its destinations (stable, so edge id
   order survives) and appended to that part's spill file as ``(src, dst,
   edge id)`` int64 triples.
2. **CSC** (:meth:`EdgeShuffle.write_part`): per part, a pass over its spill
   file counts the edges of every owned destination (the ``indptr``) and the
   cut edges and halo nodes. If the part's edges fit the working memory they
   are sorted at once; otherwise they are split by destination range into
   buckets that each fit (a second spill), and each bucket is sorted in turn
   and written at its place. The sort is stable, so within a destination
   edges keep their input order: the same CSC the in-memory writer makes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from pyg_dist.partitioning.file_names import EDGE_IDS, INDICES, INDPTR, part_dir
from pyg_dist.partitioning.file_source import FileGraph
from pyg_dist.partitioning.safetensors_stream import SafetensorsFile
from pyg_dist.partitioning.stats import PartStats

TRIPLE = 3  # src, dst, edge id
TRIPLE_BYTES = 8 * TRIPLE
SORT_BYTES_PER_EDGE = 96
"""Bytes per edge while a bucket is sorted: the triples, the destinations'
local rows, the sort order and the gathered outputs."""


def edge_file_name(part: int) -> str:
    """A part's edge file, relative to ROOT."""
    return f"{part_dir(part)}/edges.safetensors"


class EdgeShuffle:
    """Spill files of one run, in ``spill_dir`` (removed by the caller).

    Args:
        spill_dir: An empty directory on the output's file system.
        node_part: Owner of every node.
        num_parts: K.
    """

    def __init__(self, spill_dir: Path, node_part: np.ndarray, num_parts: int) -> None:
        self.spill_dir = spill_dir
        self.node_part = node_part
        self.num_parts = num_parts
        self.num_edges = np.zeros(num_parts, dtype=np.int64)

    def _spill(self, part: int) -> Path:
        return self.spill_dir / f"part-{part}.edges"

    def spill(self, graph: FileGraph, chunk_edges: int, bar: Any) -> None:
        """The shuffle pass: every edge into its owner's spill file."""
        outs = [open(self._spill(k), "wb") for k in range(self.num_parts)]
        try:
            for first, src, dst in graph.edge_chunks(chunk_edges):
                owner = self.node_part[dst]
                order = np.argsort(owner, kind="stable")
                bounds = np.zeros(self.num_parts + 1, dtype=np.int64)
                np.cumsum(np.bincount(owner, minlength=self.num_parts), out=bounds[1:])
                del owner
                triples = np.empty((src.size, TRIPLE), dtype=np.int64)
                triples[:, 0] = src[order]
                triples[:, 1] = dst[order]
                triples[:, 2] = order
                triples[:, 2] += first
                del order
                for k in np.flatnonzero(bounds[1:] > bounds[:-1]):
                    outs[k].write(triples[bounds[k]:bounds[k + 1]].tobytes())
                self.num_edges += bounds[1:] - bounds[:-1]
                bar.update(src.size)
        finally:
            for f in outs:
                f.close()

    def _chunks(self, path: Path, chunk_edges: int):
        """Triples of a spill file, ``chunk_edges`` at a time."""
        total = os.path.getsize(path) // TRIPLE_BYTES
        with open(path, "rb") as f:
            for start in range(0, total, chunk_edges):
                count = min(chunk_edges, total - start)
                yield np.fromfile(f, dtype=np.int64, count=count * TRIPLE).reshape(-1, TRIPLE)

    def write_part(self, tmp: Path, part: int, owned: np.ndarray, halo: np.ndarray,
                   budget_edges: int, bar: Any) -> PartStats:
        """Writes ``part-K/edges.safetensors`` from the part's spill file.

        Args:
            tmp: The staging directory.
            part: K.
            owned: The part's node ids, sorted.
            halo: A bool scratch array of ``num_nodes``, all False (left so).
            budget_edges: Edges that may be sorted at once.
            bar: A tqdm bar advanced by edges.
        """
        spill = self._spill(part)
        num_edges = int(self.num_edges[part])
        chunk = max(1, budget_edges)
        counts = np.zeros(owned.size, dtype=np.int64)
        cut = 0
        for triples in self._chunks(spill, chunk):
            counts += np.bincount(np.searchsorted(owned, triples[:, 1]), minlength=owned.size)
            src = triples[:, 0]
            foreign = src[self.node_part[src] != part]
            cut += foreign.size
            halo[foreign] = True
        num_halo = int(np.count_nonzero(halo))
        halo[:] = False
        indptr = np.zeros(owned.size + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        del counts
        specs = {INDPTR: (np.dtype(np.int64), (owned.size + 1,)),
                 INDICES: (np.dtype(np.int64), (num_edges,)),
                 EDGE_IDS: (np.dtype(np.int64), (num_edges,))}
        with SafetensorsFile(tmp / edge_file_name(part), specs) as out:
            out.write_rows(INDPTR, 0, indptr)
            for bucket_path, first_edge in self._buckets(spill, owned, indptr, chunk):
                triples = np.fromfile(bucket_path, dtype=np.int64).reshape(-1, TRIPLE)
                if bucket_path != spill:
                    bucket_path.unlink()
                order = np.argsort(np.searchsorted(owned, triples[:, 1]), kind="stable")
                out.write_rows(INDICES, first_edge, triples[order, 0])
                out.write_rows(EDGE_IDS, first_edge, triples[order, 2])
                bar.update(len(triples))
                del triples, order
        spill.unlink()
        return PartStats(num_nodes=int(owned.size), num_edges=num_edges,
                         num_halo_nodes=num_halo, num_cut_edges=cut)

    def _buckets(self, spill: Path, owned: np.ndarray, indptr: np.ndarray, chunk: int):
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
            for triples in self._chunks(spill, chunk):
                local = np.searchsorted(owned, triples[:, 1])
                bucket = np.searchsorted(cuts_arr, local, side="right") - 1
                order = np.argsort(bucket, kind="stable")
                bounds = np.zeros(len(paths) + 1, dtype=np.int64)
                np.cumsum(np.bincount(bucket, minlength=len(paths)), out=bounds[1:])
                grouped = triples[order]
                for b in np.flatnonzero(bounds[1:] > bounds[:-1]):
                    outs[b].write(grouped[bounds[b]:bounds[b + 1]].tobytes())
                del local, bucket, order, grouped
        finally:
            for f in outs:
                f.close()
        for b, path in enumerate(paths):
            yield path, int(indptr[cuts[b]])
