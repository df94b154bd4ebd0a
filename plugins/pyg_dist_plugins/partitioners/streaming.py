"""The ``streaming`` partitioner: linear deterministic greedy (LDG) over edge
chunks, with a balance constraint on nodes and on training nodes.

It sees the graph as :class:`~pyg_dist.partitioning.file_source.EdgeStream`
chunks (or an in-memory ``edge_index`` cut into the same chunks), so its
memory is the assignment (2 bytes a node), the neighbour counts (``2 K``
bytes a node, :class:`NeighbourCounts`) and one chunk. Nodes are placed
when first seen, in batches (a 256th of the nodes at most) so that later
nodes see earlier choices: node ``v`` goes to the part ``k`` maximising::

    |N(v) ∩ P_k| * (1 - |P_k| / C) * (1 - |T_k| / C_T if v trains)

with capacities ``C = (1 + slack) n / K`` (and ``C_T`` for training nodes);
nodes with no placed neighbour, or ties, go to the least loaded part. A node
never seen in an edge is placed at the end, on the least loaded parts
(Stanton & Kliot, KDD 2012; the train constraint follows DGL's
``balance_ntypes=train_mask``). Deterministic for a seed: the seed orders the
nodes of a chunk.

A node's edges are spread over every chunk of a pass, so ``N(v)`` seen
within a chunk is a few of its neighbours, fewer as the chunks shrink. The
restreaming passes therefore score a node from its neighbour counts: those
of this pass's chunks so far, its chunk's, and, for the chunks to come, the
previous pass's counts scaled to what is left. The first pass places a node
where it is first seen, from its chunk alone.

Across the ranks of a torchrun job (``assigns_across_ranks``), every rank
streams its own range of the edge files and the ranks proceed in rounds of
:data:`ROUND_NODES` nodes visited per rank: a rank places its nodes against
the assignment as the round began, with ``1 / world_size`` of every part's
remaining room (so the round's placements together stay within the
capacities); then the ranks exchange what they placed (``stream.exchange``)
and every rank applies all of it in rank order, a node placed by two ranks
going where the lower rank put it (and nodes past a part's capacity, which
the ranks' placements together may exceed, to the least loaded parts). Every
rank then holds the same assignment and loads. The result is deterministic
for a seed, a chunk size, the files and a number of ranks, but differs from
one host's: a rank does not see, within a round, what the others place (the
nodes of a round decide blind to each other, as a batch's do), and the edges
arrive in another order. On one host (``world_size`` 1) it is the
one-host assignment exactly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import Any, Optional

import numpy as np

from pyg_dist.errors import InvalidPartitionArgumentError

_BATCH = 1 << 17
STREAM_BYTES_PER_EDGE = 192
"""Bytes an edge of its chunk that an ``EdgeStream`` allows (what ``pyg-dist
partition --from`` sizes the chunks by, docs/partition-format.md): the
neighbour counts are paid from it."""
VISIT_BYTES_PER_EDGE = 166
"""What visiting a chunk holds at its peak, an edge of the chunk (the chunk
itself included): 150 measured (docs/partition-format.md, the bound test)
and the 16 that the first pass keeps for the counts."""
_UNSET = -1

logger = logging.getLogger(__name__)


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

    assigns_across_ranks = True
    """Runs on every rank of a torchrun job, each streaming its share of the
    edges (see the module docstring)."""

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
        """One part per node of a graph read from files, chunk by chunk (on
        every rank of a torchrun job, each its share of the chunks)."""
        mask = None
        if self.balance_train and stream.has_train_mask:
            mask = np.empty(stream.num_nodes, dtype=np.bool_)
            for s in range(0, stream.num_nodes, 1 << 22):
                mask[s:s + (1 << 22)] = stream.train_mask(s, min(s + (1 << 22),
                                                                  stream.num_nodes))
        across = int(getattr(stream, "world_size", 1)) > 1
        chunks, counted = self._within_chunk_memory(
            stream.rank_chunks if across else stream.chunks, int(stream.chunk_edges),
            int(stream.num_nodes), num_parts)
        rounds = _Rounds(stream.exchange, int(stream.world_size)) if across else None
        return self._run(int(stream.num_nodes), chunks, mask, num_parts, rounds, counted)

    def _within_chunk_memory(self, chunks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
                             chunk_edges: int, num_nodes: int, num_parts: int
                             ) -> tuple[Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
                                        bool]:
        """The chunks to stream and whether the neighbour counts fit.

        The memory an ``EdgeStream`` allows beyond the assignment is its
        chunk's share of the limit (:data:`STREAM_BYTES_PER_EDGE` an edge):
        the counts take their bytes from it and the chunks are visited in
        slices that fit in the rest. Counts that would take more than half
        of it are not kept (the cut then follows the chunk size again)."""
        allowance = chunk_edges * STREAM_BYTES_PER_EDGE
        need = NeighbourCounts.nbytes(num_nodes, num_parts)
        if self.passes < 2:  # no pass would read them
            return chunks, False
        if need > allowance // 2:
            logger.warning(
                "streaming: the neighbour counts (%.1f MiB) do not fit in half the memory "
                "limit's share for chunks of %d edges (%.1f MiB); partitioning without "
                "them, which cuts more edges: raise --memory-limit", need / 2**20,
                chunk_edges, allowance / 2**20)
            return chunks, False
        # The stream's chunk (16 bytes an edge) stays whole; its slices are
        # visited with what the counts leave.
        step = (allowance - need - 16 * chunk_edges) // (VISIT_BYTES_PER_EDGE - 16)
        if step >= chunk_edges:  # the counts fit in the allowance's slack
            return chunks, True

        def sliced() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for src, dst in chunks():
                for s in range(0, src.size, step):
                    yield src[s:s + step], dst[s:s + step]

        return sliced, True

    def _run(self, num_nodes: int, chunks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
             train: Optional[np.ndarray], num_parts: int,
             rounds: Optional[_Rounds] = None, count_neighbours: bool = True) -> np.ndarray:
        state = _State(num_nodes, num_parts, self.slack,
                       train if self.balance_train else None)
        if count_neighbours and self.passes > 1:
            state.neighbours = NeighbourCounts(num_nodes, num_parts)
        self._stream_pass(state, chunks, True, rounds)
        state.place_rest()  # on every rank alike: the states agree after a pass
        # Restreaming (Nishimura & Ugander, KDD 2013): later passes see every
        # node placed and move one when a part holds more of its neighbours.
        for _ in range(self.passes - 1):
            if state.neighbours is not None:
                state.neighbours.next_pass()
            self._stream_pass(state, chunks, False, rounds)
        return state.part

    def _stream_pass(self, state: _State,
                     chunks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
                     first_pass: bool, rounds: Optional[_Rounds]) -> None:
        """One pass over the chunks; across ranks, a round every
        :data:`ROUND_NODES` nodes a rank visits, until every rank has
        streamed its share."""
        if rounds is not None:
            rounds.begin(state)
        for src, dst in chunks():
            self._visit_chunk(state, src, dst, first_pass, rounds)
        if rounds is not None:
            rounds.end(state)

    def _visit_chunk(self, state: _State, src: np.ndarray, dst: np.ndarray,
                     first_pass: bool, rounds: Optional[_Rounds] = None) -> None:
        """Places (first pass) or reconsiders (later passes) the chunk's
        nodes, a batch at a time."""
        # Both directions, grouped by node (segments of the sorted sources
        # give every node's neighbours without a search); about 64 bytes an
        # edge at the peak.
        u, v = _grouped(src, dst, state.part.size)
        lo = np.flatnonzero(np.concatenate([[True], u[1:] != u[:-1]])) if u.size else u
        hi = np.append(lo[1:], u.size)
        nodes = u[lo]
        del u
        # Every node of the chunk: the first pass counts them once the chunk
        # is placed (it visits only the nodes not placed yet).
        chunk_nodes, chunk_lo = nodes, lo
        if first_pass:
            keep = state.part[nodes] == _UNSET
            nodes, lo, hi = nodes[keep], lo[keep], hi[keep]
        if nodes.size:
            self._place_batches(state, nodes, lo, hi, v, first_pass, rounds)
        if state.neighbours is not None and first_pass:  # later passes count as they go
            state.neighbours.count(chunk_nodes, chunk_lo, np.append(chunk_lo[1:], v.size), v,
                                   state.part)

    def _place_batches(self, state: _State, nodes: np.ndarray, lo: np.ndarray,
                       hi: np.ndarray, v: np.ndarray, first_pass: bool,
                       rounds: Optional[_Rounds]) -> None:
        """Places the chunk's ``nodes`` (neighbours ``v[lo[i]:hi[i]]``) a
        batch at a time, in the seed's order."""
        order = _seed_order(nodes, self.seed)
        nodes = nodes[order]
        # A segment's start and length share an int64 when they fit (one
        # random gather by the order instead of two: a quarter of the
        # chunk's reordering time); ``spans`` holds them, else ``lo``/``hi``.
        spans = None
        if v.size < 1 << 31:
            spans = lo << 32
            spans |= hi - lo
            spans = spans[order]
        else:
            lo, hi = lo[order], hi[order]
        del order
        # Nodes of one batch decide together, blind to each other's moves:
        # a batch must stay a small share of the graph.
        step = int(min(_BATCH, max(32, state.part.size // 256)))
        for s in range(0, nodes.size, step):
            batch = nodes[s:s + step]
            if spans is not None:
                b_lo = spans[s:s + step] >> 32
                b_hi = b_lo + (spans[s:s + step] & 0xFFFFFFFF)
            else:
                b_lo, b_hi = lo[s:s + step], hi[s:s + step]
            if rounds is not None and first_pass:
                # Another rank may have placed some since the chunk began.
                keep = state.part[batch] == _UNSET
                batch, b_lo, b_hi = batch[keep], b_lo[keep], b_hi[keep]
            if batch.size:
                state.place(batch, b_lo, b_hi, v, move=not first_pass)
            if rounds is not None:
                rounds.visited(state, batch.size)


def _grouped(src: np.ndarray, dst: np.ndarray, num_nodes: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """The edges both ways, ``(u, v)`` pairs sorted by ``u``, self loops
    dropped (they say nothing of where a node belongs; a node with nothing
    else is placed with the nodes never seen). A node's neighbours may come
    in any order (place() only counts their parts), so both ids are packed
    into one int64 and sorted by value: numpy sorts values about 3x as fast
    as it computes an argsort, and no gather of ``v`` follows."""
    u, v = np.concatenate([src, dst]), np.concatenate([dst, src])
    loops = u == v
    if loops.any():  # the copies replace u and v: no more at the peak
        u = u[~loops]
        v = v[~loops]
    del loops
    shift = max(1, int(num_nodes - 1).bit_length())
    if 2 * shift > 63:  # ids too wide to share an int64
        order = np.argsort(u)
        return u[order], v[order]
    key = u.astype(np.int64, copy=False) << shift
    del u
    key |= v
    del v
    key.sort()
    u = key >> shift
    key &= (1 << shift) - 1
    return u, key


def _seed_order(nodes: np.ndarray, seed: int) -> np.ndarray:
    """The order in which the seed visits ``nodes``: ``argsort`` of a
    splitmix of the ids. The mix is a bijection, so the keys are distinct
    and the order is unique.

    Sorted as values, not by ``argsort``: the mix's high bits and the index
    share one uint64 (numpy sorts values about 3x as fast as it argsorts),
    and the few runs of equal high bits (about ``n**2 / 2**(65 - log2 n)``
    pairs: 0 to a few in a chunk of millions) are put in the mix's order
    afterwards, giving ``argsort``'s order exactly."""
    mixed = _mix(nodes, seed)
    bits = np.uint64(max(1, int(nodes.size - 1).bit_length()))
    key = mixed >> bits
    key <<= bits
    key |= np.arange(nodes.size, dtype=np.uint64)
    key.sort()
    order = (key & ((np.uint64(1) << bits) - np.uint64(1))).astype(np.int64)
    key >>= bits
    ties = np.flatnonzero(key[1:] == key[:-1])
    s = 0
    while s < ties.size:  # each run of equal high bits, by the whole mix
        e = s
        while e + 1 < ties.size and ties[e + 1] == ties[e] + 1:
            e += 1
        run = order[ties[s]:ties[e] + 2]
        order[ties[s]:ties[e] + 2] = run[np.argsort(mixed[run])]
        s = e + 1
    return order


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
        # What a part may hold before it counts as full: the capacity on one
        # host, this rank's share of the room left in a round across ranks.
        self.limit = np.full(num_parts, self.cap)
        self.train_limit = np.full(num_parts, self.train_cap)
        self.log: Optional[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = None
        self.neighbours: Optional[NeighbourCounts] = None

    def place(self, nodes: np.ndarray, lo: np.ndarray, hi: np.ndarray, v: np.ndarray,
              move: bool = False) -> None:
        """Places a batch of nodes whose neighbours are ``v[lo[i]:hi[i]]``;
        with ``move``, the nodes are placed already and leave their part
        only for a strictly better one."""
        is_train = self.train[nodes] if self.train is not None else None
        if move:
            current = self.part[nodes].astype(np.int64)
            self._uncount(current, is_train)
        # float32 throughout: the scores are small counts, and the batch's
        # K-wide arithmetic is most of a visit's cost.
        score = self._chunk_counts(nodes, lo, hi, v)
        if self.neighbours is not None:
            # A restreaming pass visits every node of the chunk with its
            # whole segment: its chunk counts are what the pass counts.
            score += self.neighbours.estimate(nodes, score, record=move)
        score *= np.maximum(0.0, 1.0 - self.size / self.cap).astype(np.float32)
        # The train rows by index: a boolean row mask is twice as slow.
        trains = np.flatnonzero(is_train) if is_train is not None else None
        if trains is not None:
            train_room = np.maximum(0.0, 1.0 - self.train_size / self.train_cap)
            score[trains] *= train_room.astype(np.float32)
        # Ties (and nodes with no placed neighbour) go to the least loaded
        # part: a small bonus for room, far below one neighbour's worth.
        score += ((1.0 - self.size / self.cap) * 1e-6).astype(np.float32)
        full = self.size >= self.limit
        if full.any():
            score[:, full] = -np.inf
        if trains is not None:
            full = np.flatnonzero(self.train_size >= self.train_limit)
            if full.size:
                score[np.ix_(trains, full)] = -np.inf
        chosen = np.argmax(score, axis=1)
        if move:
            # Stay unless the best part is better by a whole neighbour's
            # share. (Flat indices: a 2-D pair gather is three times as slow.)
            at = np.arange(0, score.size, self.k)
            flat = score.reshape(-1)
            stay = flat[at + chosen] <= flat[at + current] + 0.5 * (
                1.0 - self.size[chosen] / self.cap)
            chosen[stay] = current[stay]
        self._commit(nodes, chosen, is_train)

    def _chunk_counts(self, nodes: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      v: np.ndarray) -> np.ndarray:
        """Per node and part, the placed neighbours ``v[lo[i]:hi[i]]``."""
        lengths = hi - lo
        # The segments' positions in v, and each edge's row of the table
        # (times K), built in place: the batch's edges are millions.
        index = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths)
        index += np.arange(index.size)
        parts = self.part[v[index]]
        del index
        cell = np.repeat(np.arange(0, nodes.size * self.k, self.k), lengths)
        if parts.min(initial=0) == _UNSET:  # the first pass: unplaced ones count nowhere
            keep = parts != _UNSET
            cell, parts = cell[keep], parts[keep]
        cell += parts
        return np.bincount(cell, minlength=nodes.size * self.k
                           ).reshape(nodes.size, self.k).astype(np.float32)

    def _uncount(self, parts: np.ndarray, is_train: Optional[np.ndarray]) -> None:
        """Takes placed nodes out of the loads before they are reconsidered."""
        self.size -= np.bincount(parts, minlength=self.k)
        if is_train is not None:
            self.train_size -= np.bincount(parts[is_train], minlength=self.k)

    def _commit(self, nodes: np.ndarray, chosen: np.ndarray,
                is_train: Optional[np.ndarray]) -> None:
        """Records the choices; nodes that would overflow a part's capacity
        (the batch decided at once) go to the least loaded parts instead."""
        self._spread(chosen, np.ones(chosen.size, dtype=bool), self.size, self.limit)
        if is_train is not None:
            self._spread(chosen, is_train, self.train_size, self.train_limit)
        if self.log is not None:
            old = self.part[nodes].astype(np.int64)
            changed = old != chosen
            self.log.append((nodes[changed], old[changed], chosen[changed]))
        self.part[nodes] = chosen
        self.size += np.bincount(chosen, minlength=self.k)
        if is_train is not None:
            self.train_size += np.bincount(chosen[is_train], minlength=self.k)

    def _spread(self, chosen: np.ndarray, among: np.ndarray, size: np.ndarray,
                limit: np.ndarray) -> None:
        """Moves the ``among`` nodes past a part's room in ``size`` / ``limit``
        to the least loaded parts (in place)."""
        load = size + np.bincount(chosen[among], minlength=self.k)
        for k in np.flatnonzero(load > limit):
            mine = np.flatnonzero(among & (chosen == k))
            for i in mine[max(0, int(limit[k] - size[k])):]:
                load[k] -= 1
                target = int(np.argmin(load))
                chosen[i] = target
                load[target] += 1

    def apply_within_capacity(self, nodes: np.ndarray, parts: np.ndarray) -> None:
        """Puts ``nodes`` (placed or not) in ``parts`` (changed in place),
        keeping the loads: another rank's placements of the same round may
        have filled a part, and nodes past its capacity go to the least
        loaded parts instead, as within a batch."""
        if not nodes.size:
            return
        old = self.part[nodes].astype(np.int64)
        was = old != _UNSET
        is_train = self.train[nodes] if self.train is not None else None
        self.size -= np.bincount(old[was], minlength=self.k)
        self._spread(parts, np.ones(parts.size, dtype=bool), self.size,
                     np.full(self.k, self.cap))
        if is_train is not None:
            self.train_size -= np.bincount(old[was & is_train], minlength=self.k)
            self._spread(parts, is_train, self.train_size, np.full(self.k, self.train_cap))
            self.train_size += np.bincount(parts[is_train], minlength=self.k)
        self.size += np.bincount(parts, minlength=self.k)
        self.part[nodes] = parts

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


class NeighbourCounts:
    """Per node and part, how many of its neighbours were seen in that part:
    what lets a node be scored from all its neighbours rather than from the
    few that share its chunk (a node's edges are spread over every chunk of
    a pass, so without them the cut grows as the chunks shrink).

    Two counts a node and part in ``uint8``, saturating at 255 (a hub
    with more neighbours in every part only loses the tie-break among
    them): ``seen``, the edges of the chunks streamed so far in this pass,
    counted once their chunk is placed, and ``before``, the previous pass's
    (every edge). A node in a restreaming pass is scored from this pass's
    counts plus its chunk's edges, the edges not yet streamed estimated from
    ``before`` (scaled to their share). In the first pass a node is placed
    where it is first seen, so only its chunk informs it, as before; the
    counts inform every later visit.

    Both counts of a node lie side by side in one ``num_nodes x 2 K`` table
    (halves that swap roles each pass): a visit reads and writes one
    scattered ``2 K``-byte row rather than two ``K``-byte rows of two
    tables, which at 1/20 scale cost as much again (the tables are far
    bigger than the caches).

    Args:
        num_nodes: Number of nodes.
        num_parts: Number of parts.
    """

    def __init__(self, num_nodes: int, num_parts: int) -> None:
        self.k = num_parts
        self.table = np.zeros((num_nodes, 2 * num_parts), dtype=np.uint8)
        self.seen_at = 0  # this pass's half: columns seen_at to seen_at + K
        self.has_before = False
        # The table as one 2K-byte item a row: a gather or scatter of items
        # is about twice as fast as one of 2-D rows.
        self._rows = self.table.view(np.dtype((np.void, 2 * num_parts)))[:, 0]

    @staticmethod
    def nbytes(num_nodes: int, num_parts: int) -> int:
        """Bytes held by the table (both counts)."""
        return 2 * num_nodes * num_parts

    @property
    def seen(self) -> np.ndarray:
        """This pass's counts (a view, ``num_nodes x num_parts``)."""
        return self.table[:, self.seen_at:self.seen_at + self.k]

    @property
    def before(self) -> Optional[np.ndarray]:
        """The previous pass's counts (a view), None in the first pass."""
        if not self.has_before:
            return None
        at = self.k - self.seen_at
        return self.table[:, at:at + self.k]

    def next_pass(self) -> None:
        """The pass's counts become ``before``; the next pass counts anew."""
        self.seen_at = self.k - self.seen_at
        self.has_before = True
        self.seen.fill(0)

    def estimate(self, nodes: np.ndarray, local: np.ndarray, record: bool = False
                 ) -> np.ndarray:
        """What ``nodes``' neighbours outside their chunk add to ``local``
        (their chunk's counts, ``len(nodes) x num_parts``); with ``record``,
        ``local`` is also counted as seen (instead of :meth:`count`)."""
        k, at = self.k, self.seen_at
        rows = np.take(self._rows, nodes).view(np.uint8).reshape(nodes.size, 2 * k)
        seen = rows[:, at:at + k].astype(np.float32)
        if record:
            rows[:, at:at + k] = np.minimum(seen + local, 255.0)
            self._rows[nodes] = rows.view(self._rows.dtype)[:, 0]
        if not self.has_before:
            return seen
        before = rows[:, k - at:2 * k - at].astype(np.float32)
        # Row sums by einsum: a fifth of sum(axis=1)'s time over rows of K.
        # (Not a product with ones: OpenBLAS's threads would spin on the
        # other core between the calls, a whole core at 1/4 scale.)
        total = np.einsum("ij->i", before)
        known = np.einsum("ij->i", seen) + np.einsum("ij->i", local)
        rest = np.clip(1.0 - known / np.maximum(total, 1.0), 0.0, 1.0)
        before *= rest[:, None]
        before += seen
        return before

    def count(self, nodes: np.ndarray, lo: np.ndarray, hi: np.ndarray, v: np.ndarray,
              part: np.ndarray) -> None:
        """Adds a placed chunk: node ``nodes[i]`` has neighbours
        ``v[lo[i]:hi[i]]`` (segments that follow each other), now in
        ``part``; about a million edges at a time."""
        k = self.k
        table = self.table.reshape(-1)
        s = 0
        while s < nodes.size:
            t = max(s + 1, int(np.searchsorted(lo, lo[s] + (1 << 20), side="left")))
            t = min(t, nodes.size)
            lengths = hi[s:t] - lo[s:t]
            row = np.repeat(np.arange(t - s), lengths)
            neighbours = v[lo[s]:hi[t - 1]]
            parts = part[neighbours].astype(np.int64)
            if parts.min(initial=0) == _UNSET:  # an unplaced neighbour counts nowhere
                keep = parts != _UNSET
                row, parts = row[keep], parts[keep]
            if not row.size:
                s = t
                continue
            row *= k
            row += parts
            # Most nodes have neighbours in few parts: only those cells
            # change, found by sorting the edges' cells (already in row
            # order) rather than by a bincount K times as long as the edges.
            row.sort()
            first = np.flatnonzero(np.concatenate([[True], row[1:] != row[:-1]]))
            added = np.diff(np.append(first, row.size))
            at, within = np.divmod(row[first], k)
            flat = nodes[s:t][at] * (2 * k) + (within + self.seen_at)
            table[flat] = np.minimum(table[flat] + np.minimum(added, 255), 255)
            s = t


ROUND_NODES = 8192
"""Nodes a rank visits between two exchanges when partitioning across
ranks: the ranks' placements of one round are blind to each other (as a
batch's nodes are), so a round must stay a small share of the graph; a round
costs an all-gather (about a millisecond on a LAN)."""


class _Rounds:
    """The rounds of a pass across ranks (see the module docstring): what this
    rank placed in a round is undone, exchanged, and every rank's placements
    applied in rank order, so that every rank ends the round with the same
    state.

    Args:
        exchange: ``stream.exchange``: every rank's int64 array, in rank order.
        world_size: Number of ranks.
    """

    def __init__(self, exchange: Callable[[np.ndarray], list[np.ndarray]],
                 world_size: int) -> None:
        self.exchange, self.world = exchange, world_size
        self._size = self._train_size = np.zeros(0)
        self._visited = 0
        self.count = 0  # rounds so far

    def begin(self, state: _State) -> None:
        """Starts a round: this rank may fill ``1 / world_size`` of the room
        every part has left, and its placements are logged."""
        self._size, self._train_size = state.size.copy(), state.train_size.copy()
        state.limit = state.size + np.maximum(0.0, state.cap - state.size) / self.world
        state.train_limit = state.train_size + np.maximum(
            0.0, state.train_cap - state.train_size) / self.world
        state.log = []
        self._visited = 0

    def visited(self, state: _State, nodes: int) -> None:
        """Counts a batch; ends the round and starts the next after
        :data:`ROUND_NODES` nodes."""
        self._visited += nodes
        # A small graph gets small rounds: a round stays about 1/64 of it.
        if self._visited >= max(32, min(ROUND_NODES, state.part.size // 64)):
            self._sync(state, active=True)
            self.begin(state)

    def end(self, state: _State) -> None:
        """Ends the pass: rounds go on (this rank sending only what it placed
        last) until no rank has edges left to stream in it."""
        while self._sync(state, active=False):
            self.begin(state)
        state.limit = np.full(state.k, state.cap)
        state.train_limit = np.full(state.k, state.train_cap)
        state.log = None

    def _sync(self, state: _State, active: bool) -> bool:
        """Ends a round: exchanges the placements, applies every rank's;
        returns whether some rank is still streaming (``active``).

        Raises:
            InvalidPartitionArgumentError: a rank sent a malformed message.
        """
        log, state.log = state.log or [], None
        nodes = np.concatenate([e[0] for e in log]).astype(np.int64) if log else \
            np.zeros(0, np.int64)
        chosen = np.concatenate([e[2] for e in log]) if log else np.zeros(0, np.int64)
        if log:  # undo this rank's placements: all ranks' are applied alike below
            state.part[nodes] = np.concatenate([e[1] for e in log])
        state.size, state.train_size = self._size, self._train_size
        got = self.exchange(np.concatenate([[int(active)], nodes, chosen]))
        self.count += 1
        taken = np.zeros(0, np.int64)
        for message in got:
            placed, parts = _placements(message, state.part.size, state.k)
            keep = ~np.isin(placed, taken)
            placed, parts = placed[keep], parts[keep].copy()
            state.apply_within_capacity(placed, parts)
            taken = np.concatenate([taken, placed])
        return any(int(m[0]) for m in got if m.size)


def _placements(message: np.ndarray, num_nodes: int, num_parts: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The ``(nodes, parts)`` of a rank's round message, checked."""
    n = (message.size - 1) // 2
    placed, parts = message[1:1 + n], message[1 + n:]
    if message.size < 1 or message.size != 1 + 2 * n or (n and (
            int(placed.min()) < 0 or int(placed.max()) >= num_nodes
            or int(parts.min()) < 0 or int(parts.max()) >= num_parts)):
        raise InvalidPartitionArgumentError(
            f"streaming: a rank sent a malformed round of {message.size} values; the ranks "
            f"must run the same pyg-dist and the same options")
    return placed, parts
