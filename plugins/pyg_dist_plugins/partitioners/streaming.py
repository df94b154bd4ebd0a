"""The ``streaming`` partitioner: linear deterministic greedy (LDG) over edge
chunks, with a balance constraint on nodes and on training nodes.

It sees the graph as :class:`~pyg_dist.partitioning.file_source.EdgeStream`
chunks (or an in-memory ``edge_index`` cut into the same chunks), so its
memory is the assignment (2 bytes a node) plus one chunk. Nodes are placed
when first seen, in small batches so that later nodes see earlier choices:
node ``v`` goes to the part ``k`` maximising::

    |N(v) ∩ P_k| * (1 - |P_k| / C) * (1 - |T_k| / C_T if v trains)

with capacities ``C = (1 + slack) n / K`` (and ``C_T`` for training nodes);
nodes with no placed neighbour, or ties, go to the least loaded part. A node
never seen in an edge is placed at the end, on the least loaded parts
(Stanton & Kliot, KDD 2012; the train constraint follows DGL's
``balance_ntypes=train_mask``). Deterministic for a seed: the seed orders the
nodes of a chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, Optional

import numpy as np

from pyg_dist.errors import InvalidPartitionArgumentError

_BATCH = 1024
_UNSET = -1


class StreamingPartitioner:
    """LDG over edge chunks (see the module docstring).

    Args:
        slack: Allowed imbalance: a part holds at most ``(1 + slack) n / K``
            nodes (and as many training nodes, relatively).
        balance_train: Also balance ``train_mask`` nodes across parts.
        seed: Orders the nodes placed from each chunk; the same seed gives
            the same parts.
        chunk_edges: Edges per chunk for an in-memory graph (the file path
            sizes chunks from the memory limit).
    """

    def __init__(self, slack: float = 0.05, balance_train: bool = True, seed: int = 0,
                 passes: int = 3, chunk_edges: int = 1 << 20) -> None:
        if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not (
                0 <= slack <= 10):
            raise InvalidPartitionArgumentError(
                f"streaming: slack must be a number in [0, 10], got {slack!r}")
        if not isinstance(balance_train, bool):
            raise InvalidPartitionArgumentError(
                f"streaming: balance_train must be true or false, got {balance_train!r}")
        for name, value, least in (("seed", seed, 0), ("passes", passes, 1),
                                   ("chunk_edges", chunk_edges, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidPartitionArgumentError(
                    f"streaming: {name} must be an int >= {least}, got {value!r}")
        self.slack, self.balance_train, self.seed = float(slack), balance_train, seed
        self.chunk_edges, self.passes = chunk_edges, passes

    def options(self) -> dict[str, Any]:
        """The options recorded in ``meta.json``."""
        return {"slack": self.slack, "balance_train": self.balance_train, "seed": self.seed,
                "passes": self.passes}

    def assign(self, graph: Any, num_parts: int) -> np.ndarray:
        """One part per node of an in-memory ``PartitionInput``."""
        edge_index = graph.edge_index.numpy()
        mask = None if graph.train_mask is None else graph.train_mask.numpy()

        def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for s in range(0, edge_index.shape[1], self.chunk_edges):
                yield (edge_index[0, s:s + self.chunk_edges].astype(np.int64),
                       edge_index[1, s:s + self.chunk_edges].astype(np.int64))

        return self._run(int(graph.num_nodes), chunks, mask, num_parts)

    def assign_stream(self, stream: Any, num_parts: int) -> np.ndarray:
        """One part per node of a graph read from files, chunk by chunk."""
        mask = None
        if self.balance_train and stream.has_train_mask:
            mask = np.empty(stream.num_nodes, dtype=np.bool_)
            for s in range(0, stream.num_nodes, 1 << 22):
                mask[s:s + (1 << 22)] = stream.train_mask(s, min(s + (1 << 22),
                                                                  stream.num_nodes))
        return self._run(int(stream.num_nodes), stream.chunks, mask, num_parts)

    def _run(self, num_nodes: int, chunks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
             train: Optional[np.ndarray], num_parts: int) -> np.ndarray:
        state = _State(num_nodes, num_parts, self.slack,
                       train if self.balance_train else None)
        for src, dst in chunks():
            self._visit_chunk(state, src, dst, first_pass=True)
        state.place_rest()
        # Restreaming (Nishimura & Ugander, KDD 2013): later passes see every
        # node placed and move one when a part holds more of its neighbours.
        for _ in range(self.passes - 1):
            for src, dst in chunks():
                self._visit_chunk(state, src, dst, first_pass=False)
        return state.part

    def _visit_chunk(self, state: _State, src: np.ndarray, dst: np.ndarray,
                     first_pass: bool) -> None:
        """Places (first pass) or reconsiders (later passes) the chunk's
        nodes, a batch at a time."""
        # Both directions, grouped by node (segments of the sorted sources
        # give every node's neighbours without a search); about 64 bytes an
        # edge at the peak. Self loops are dropped per batch, in place().
        u = np.concatenate([src, dst])
        order = np.argsort(u)
        u = u[order]
        v = np.concatenate([dst, src])[order]
        del order
        lo = np.flatnonzero(np.concatenate([[True], u[1:] != u[:-1]])) if u.size else u
        hi = np.append(lo[1:], u.size)
        nodes = u[lo]
        del u
        if first_pass:
            keep = state.part[nodes] == _UNSET
            nodes, lo, hi = nodes[keep], lo[keep], hi[keep]
        if not nodes.size:
            return
        # The seed orders the batches: a splitmix of the id.
        order = np.argsort(_mix(nodes, self.seed), kind="stable")
        nodes, lo, hi = nodes[order], lo[order], hi[order]
        # Nodes of one batch decide together, blind to each other's moves:
        # a batch must stay a small share of the graph.
        step = int(min(_BATCH, max(32, state.part.size // 256)))
        for s in range(0, nodes.size, step):
            state.place(nodes[s:s + step], lo[s:s + step], hi[s:s + step], v,
                        move=not first_pass)


def _mix(ids: np.ndarray, seed: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = ids.astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
    return h


class _State:
    """The assignment in progress and the part loads."""

    def __init__(self, num_nodes: int, num_parts: int, slack: float,
                 train: Optional[np.ndarray]) -> None:
        self.part = np.full(num_nodes, _UNSET, dtype=np.int16 if num_parts < 1 << 15
                            else np.int32)
        self.k = num_parts
        self.size = np.zeros(num_parts, dtype=np.float64)
        self.cap = max(1.0, math.ceil((1 + slack) * num_nodes / num_parts))
        self.train = train
        total_train = int(np.count_nonzero(train)) if train is not None else 0
        self.train_size = np.zeros(num_parts, dtype=np.float64)
        self.train_cap = max(1.0, math.ceil((1 + slack) * total_train / num_parts))

    def place(self, nodes: np.ndarray, lo: np.ndarray, hi: np.ndarray, v: np.ndarray,
              move: bool = False) -> None:
        """Places a batch of nodes whose neighbours are ``v[lo[i]:hi[i]]``;
        with ``move``, the nodes are placed already and leave their part
        only for a strictly better one."""
        if move:
            current = self.part[nodes].astype(np.int64)
            is_train = self.train[nodes] if self.train is not None else None
            self._uncount(current, is_train)
        lengths = hi - lo
        row = np.repeat(np.arange(nodes.size), lengths)
        starts = np.repeat(lo - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        neighbours = v[np.arange(row.size) + starts] if row.size else row
        parts = self.part[neighbours].astype(np.int64)
        placed = (parts != _UNSET) & (neighbours != nodes[row])
        counts = np.bincount(row[placed] * self.k + parts[placed],
                             minlength=nodes.size * self.k).reshape(nodes.size, self.k)
        score = counts * np.maximum(0.0, 1.0 - self.size / self.cap)
        is_train = self.train[nodes] if self.train is not None else None
        if is_train is not None:
            train_room = np.maximum(0.0, 1.0 - self.train_size / self.train_cap)
            score[is_train] *= train_room
        # Ties (and nodes with no placed neighbour) go to the least loaded
        # part: a small bonus for room, far below one neighbour's worth.
        score += (1.0 - self.size / self.cap) * 1e-6
        score[:, self.size >= self.cap] = -np.inf
        if is_train is not None:
            full = np.flatnonzero(self.train_size >= self.train_cap)
            score[np.ix_(np.flatnonzero(is_train), full)] = -np.inf
        chosen = np.argmax(score, axis=1)
        if move:
            rows = np.arange(nodes.size)
            # Stay unless the best part is better by a whole neighbour's share.
            stay = score[rows, chosen] <= score[rows, current] + 0.5 * (
                1.0 - self.size[chosen] / self.cap)
            chosen[stay] = current[stay]
        self._commit(nodes, chosen, is_train)

    def _uncount(self, parts: np.ndarray, is_train: Optional[np.ndarray]) -> None:
        """Takes placed nodes out of the loads before they are reconsidered."""
        self.size -= np.bincount(parts, minlength=self.k)
        if is_train is not None:
            self.train_size -= np.bincount(parts[is_train], minlength=self.k)

    def _commit(self, nodes: np.ndarray, chosen: np.ndarray,
                is_train: Optional[np.ndarray]) -> None:
        """Records the choices; nodes that would overflow a part's capacity
        (the batch decided at once) go to the least loaded parts instead."""
        self._spread(chosen, np.ones(chosen.size, dtype=bool), self.size, self.cap)
        if is_train is not None:
            self._spread(chosen, is_train, self.train_size, self.train_cap)
        self.part[nodes] = chosen
        self.size += np.bincount(chosen, minlength=self.k)
        if is_train is not None:
            self.train_size += np.bincount(chosen[is_train], minlength=self.k)

    def _spread(self, chosen: np.ndarray, among: np.ndarray, size: np.ndarray,
                cap: float) -> None:
        """Moves the ``among`` nodes past a part's room in ``size`` / ``cap``
        to the least loaded parts (in place)."""
        load = size + np.bincount(chosen[among], minlength=self.k)
        for k in np.flatnonzero(load > cap):
            mine = np.flatnonzero(among & (chosen == k))
            for i in mine[max(0, int(cap - size[k])):]:
                load[k] -= 1
                target = int(np.argmin(load))
                chosen[i] = target
                load[target] += 1

    def place_rest(self) -> None:
        """Nodes never seen in an edge: dealt to the least loaded parts."""
        rest = np.flatnonzero(self.part == _UNSET)
        if not rest.size:
            return
        total = self.size.sum() + rest.size
        # Fill every part up to the mean, in part order, then round-robin.
        target = np.full(self.k, total // self.k) + (np.arange(self.k) < total % self.k)
        room = np.maximum(0, target - self.size).astype(np.int64)
        fill = np.repeat(np.arange(self.k), room)[:rest.size]
        if fill.size < rest.size:
            fill = np.concatenate([fill, np.arange(rest.size - fill.size) % self.k])
        self.part[rest] = fill
        self.size += np.bincount(fill, minlength=self.k)
