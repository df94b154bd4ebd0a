"""The ``hash`` partitioner: a node's part is a hash of its id.

Needs no memory beyond the book and never reads an edge, so it partitions a
graph of any size from files (``pyg-dist partition --from``); parts are
balanced in expectation. The edge cut is that of a random assignment: a
baseline, and what AliGraph / Euler use by default. Deterministic for a seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning import splitmix64

_WINDOW = 1 << 20


def hash_parts(start: int, stop: int, num_parts: int, seed: int) -> np.ndarray:
    """The parts of node ids ``start:stop`` (int64): splitmix64 of
    ``id + seed * golden``, modulo ``num_parts``."""
    h = splitmix64(np.arange(start, stop, dtype=np.uint64), seed)
    return (h % np.uint64(num_parts)).astype(np.int64)


class HashPartitioner:
    """Assigns node ``v`` to ``splitmix64(v, seed) % num_parts``.

    Args:
        seed: Seed of the hash; the same seed gives the same parts.
    """

    assigns_across_ranks = True
    """Across the ranks of a torchrun job every rank computes the whole book
    itself (it depends on the seed and the node count only): nothing is
    broadcast."""

    def __init__(self, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InvalidPartitionArgumentError(
                f"hash: seed must be a non-negative int, got {seed!r}")
        self.seed = seed

    def _assign(self, num_nodes: int, num_parts: int) -> np.ndarray:
        out = np.empty(num_nodes, dtype=np.uint8 if num_parts <= 256 else np.int16)
        for start in range(0, num_nodes, _WINDOW):
            stop = min(start + _WINDOW, num_nodes)
            out[start:stop] = hash_parts(start, stop, num_parts, self.seed)
        return out

    def assign(self, graph: Any, num_parts: int) -> np.ndarray:
        """One part id per node of an in-memory graph (edges are not read)."""
        return self._assign(int(graph.num_nodes), num_parts)

    def assign_stream(self, stream: Any, num_parts: int) -> np.ndarray:
        """One part id per node of a graph read from files (edges are not read)."""
        return self._assign(int(stream.num_nodes), num_parts)

    def options(self) -> dict[str, Any]:
        """The options recorded in ``meta.json``."""
        return {"seed": self.seed}
