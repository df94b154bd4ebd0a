"""What a partitioner plugin sees: :class:`PartitionInput` and the
:class:`Partitioner` protocol.

A partitioner only *assigns* nodes to parts; the writer owns all file I/O
(the split GraphLearn-for-PyTorch uses). Partitioners that need an undirected
adjacency (METIS and friends) get it from :meth:`PartitionInput.symmetric_csr`,
built vectorised in numpy without Python lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from pyg_dist.partitioning.splitmix import splitmix64

# Entries processed per step when building the symmetric CSR: bounds the size of
# temporaries to a few MB whatever the graph size.
_CHUNK = 1 << 20


@dataclass
class PartitionInput:
    """The graph handed to :meth:`Partitioner.assign`.

    Args:
        num_nodes: Number of nodes; ids are ``0 .. num_nodes - 1``.
        edge_index: ``[2, num_edges]`` integer tensor of directed edges
            ``(src, dst)``.
        train_mask: Optional boolean mask of training nodes, for partitioners
            that balance them across parts.
        node_type: For a heterogeneous graph, the index into ``node_types``
            of every node's type (int64 ``[num_nodes]``; the nodes of each
            type are contiguous, in ``node_types`` order); ``None`` when
            homogeneous. Partitioners may balance each type across parts.
        node_types: The node type names of a heterogeneous graph.
    """

    num_nodes: int
    edge_index: Tensor
    train_mask: Optional[Tensor] = None
    node_type: Optional[Tensor] = None
    node_types: Optional[list[str]] = None

    @classmethod
    def of_types(cls, num_nodes: dict[Optional[str], int], edge_index: Tensor,
                 train_mask: Optional[Tensor] = None) -> PartitionInput:
        """The view of a graph whose node types (``num_nodes``: type ->
        count, in the graph's order) are concatenated in order; one type
        ``None`` gives a homogeneous graph's input."""
        total = sum(num_nodes.values())
        if list(num_nodes) == [None]:
            return cls(total, edge_index, train_mask=train_mask)
        counts = torch.tensor(list(num_nodes.values()), dtype=torch.int64)
        return cls(total, edge_index, train_mask=train_mask,
                   node_type=torch.repeat_interleave(torch.arange(len(counts)), counts),
                   node_types=list(num_nodes))

    @property
    def is_hetero(self) -> bool:
        """Whether this is the homogeneous view of a heterogeneous graph."""
        return self.node_type is not None

    @property
    def num_edges(self) -> int:
        """Number of directed edges."""
        return int(self.edge_index.size(1))

    def degree(self) -> Tensor:
        """In-degree + out-degree of every node (int64): the work a node brings."""
        deg = torch.bincount(self.edge_index[0], minlength=self.num_nodes)
        deg += torch.bincount(self.edge_index[1], minlength=self.num_nodes)
        return deg

    def symmetric_csr(self, max_degree: Optional[int] = None,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The undirected adjacency as METIS wants it: both directions of every
        edge, no self loops, no duplicates, sorted.

        Args:
            max_degree: Optionally thin the adjacency for partitioners whose
                memory grows with it: the undirected edge ``{u, v}`` is kept
                with probability ``min(1, max_degree / min(deg u, deg v))``
                (a deterministic hash of the pair), so every node keeps about
                ``max_degree`` or more of its edges and the edges of
                low-degree nodes are all kept. ``None`` keeps everything.
            seed: Seed of that hash.

        Returns:
            ``(xadj, adjncy)``, both int64 numpy arrays (METIS's ``idx_t`` in
            the pymetis wheel is 64-bit, so they are passed without a copy).
            Neighbours of ``v`` are ``adjncy[xadj[v]:xadj[v + 1]]``.
        """
        return symmetric_csr(self.edge_index, self.num_nodes, max_degree=max_degree,
                             seed=seed)


@runtime_checkable
class Partitioner(Protocol):
    """What a ``pyg_dist.partitioners`` plugin provides.

    The entry point names a class; the writer builds it with the user's
    options (``cls(**options)``) and calls :meth:`assign`.
    """

    def assign(self, graph: PartitionInput, num_parts: int) -> Tensor:
        """Returns one part id in ``[0, num_parts)`` per node (an integer tensor)."""
        ...

    def options(self) -> dict[str, Any]:
        """The JSON-safe options recorded in ``meta.json``."""
        ...


def symmetric_csr(edge_index: Tensor, num_nodes: int, *, max_degree: Optional[int] = None,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Builds the sorted, deduplicated, loop-free symmetric CSR of a graph.

    Memory: one int64 array of ``2 * num_edges`` keys (``row * n + col``),
    sorted in place and compacted in place, then turned into column ids in
    place; ``xadj`` comes from a binary search over the sorted keys, so no row
    array is ever materialised. Peak extra memory is about ``16 * num_edges``
    bytes plus chunk-sized temporaries.

    Args:
        edge_index: ``[2, E]`` integer tensor.
        num_nodes: Number of nodes.
        max_degree: Thin the adjacency (see :meth:`PartitionInput.symmetric_csr`).
        seed: Seed of the thinning hash.
    """
    n = int(num_nodes)
    src = edge_index[0].numpy()
    dst = edge_index[1].numpy()
    num_edges = src.shape[0]
    keys = np.empty(2 * num_edges, dtype=np.int64)
    for s in range(0, num_edges, _CHUNK):
        e = min(s + _CHUNK, num_edges)
        a = src[s:e].astype(np.int64, copy=False)
        b = dst[s:e].astype(np.int64, copy=False)
        fwd = keys[s:e]
        np.multiply(a, n, out=fwd)
        fwd += b
        bwd = keys[num_edges + s:num_edges + e]
        np.multiply(b, n, out=bwd)
        bwd += a
    keys.sort()
    # resize() shrinks the buffer in place (realloc), so the memory of
    # dropped duplicates is returned before METIS runs; a slice would keep it.
    keys.resize(_compact(keys, n), refcheck=False)
    xadj = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * n)
    if max_degree is not None:
        keys.resize(_thin(keys, n, np.diff(xadj), max_degree, seed), refcheck=False)
        xadj = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * n)
    for s in range(0, keys.shape[0], _CHUNK):
        block = keys[s:s + _CHUNK]
        np.remainder(block, n, out=block)
    return xadj.astype(np.int64, copy=False), keys


def _compact(keys: np.ndarray, n: int) -> int:
    """Drops duplicate keys and self loops from sorted ``keys`` in place;
    returns how many remain at the front.

    ``row * n + col`` is a self loop iff it is divisible by ``n + 1``.
    """
    write = 0
    prev = np.int64(-1)
    for s in range(0, keys.shape[0], _CHUNK):
        block = keys[s:s + _CHUNK]
        keep = np.empty(block.shape[0], dtype=bool)
        keep[0] = block[0] != prev
        np.not_equal(block[1:], block[:-1], out=keep[1:])
        keep &= (block % (n + 1)) != 0
        prev = block[-1]
        write = _move(keys, block, keep, write)
    return write


def _thin(keys: np.ndarray, n: int, degree: np.ndarray, max_degree: int, seed: int) -> int:
    """Keeps ``{u, v}`` with probability ``min(1, max_degree / min(deg))``,
    deciding by a hash of the unordered pair so both directions agree."""
    write = 0
    for s in range(0, keys.shape[0], _CHUNK):
        block = keys[s:s + _CHUNK]
        row, col = np.divmod(block, n)
        low = np.minimum(row, col)
        pair = low * n + np.maximum(row, col)
        # A hash of the pair id: uniform in [0, 1).
        h = splitmix64(pair, seed)
        uniform = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        smaller = np.minimum(degree[row], degree[col]).astype(np.float64)
        keep = uniform * smaller < max_degree
        write = _move(keys, block, keep, write)
    return write


def _move(keys: np.ndarray, block: np.ndarray, keep: np.ndarray, write: int) -> int:
    """Copies the kept entries of ``block`` to ``keys[write:]`` (never ahead of
    the block being read) and returns the new write position."""
    survivors = block[keep]
    keys[write:write + survivors.shape[0]] = survivors
    return write + survivors.shape[0]
