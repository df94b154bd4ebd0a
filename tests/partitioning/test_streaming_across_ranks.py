"""The ``streaming`` partitioner across ranks (``assigns_across_ranks``):
each rank streams its share of the edge files and the ranks exchange their
placements in rounds through ``EdgeStream.exchange``. Here the ranks are
threads and the exchange an all-gather between them (the contract a plugin
sees; ``test_cross_host.py`` runs it over gloo between processes): every
rank ends with the same book, the same one on every run, balanced, and
with a cut below ``hash``'s and near one host's on a graph with communities."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyg_dist.partitioning.file_source import EdgeStream, FileGraph
from pyg_dist_plugins.partitioners.hash import HashPartitioner
from pyg_dist_plugins.partitioners.streaming import StreamingPartitioner, _grouped

NUM_NODES, BLOCK = 4000, 50


def _blocks(directory: Path, files: int = 4, seed: int = 0) -> FileGraph:
    """Blocks of 50 ids with 90% of the edges inside a block, edges in
    source order (as a CSR dump writes them) over ``files`` parquet files,
    a training mask on 30%."""
    rng = np.random.default_rng(seed)
    num_edges = 40_000
    src = rng.integers(0, NUM_NODES, num_edges)
    inside = rng.random(num_edges) < 0.9
    dst = np.where(inside, src // BLOCK * BLOCK + rng.integers(0, BLOCK, num_edges),
                   rng.integers(0, NUM_NODES, num_edges))
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    (directory / "edges").mkdir(parents=True)
    (directory / "nodes").mkdir()
    cuts = np.linspace(0, num_edges, files + 1).astype(int)
    for i in range(files):
        pq.write_table(pa.table({"src": src[cuts[i]:cuts[i + 1]], "dst": dst[cuts[i]:cuts[i + 1]]}),
                       directory / "edges" / f"part-{i:05d}.parquet")
    np.save(directory / "nodes" / "train_mask.npy", rng.random(NUM_NODES) < 0.3)
    return FileGraph.open(directory)


class _AllGather:
    """An all-gather between ``world`` threads: what ``EdgeStream.exchange``
    does between ranks."""

    def __init__(self, world: int) -> None:
        self.barrier = threading.Barrier(world, timeout=60)
        self.slots: list[np.ndarray] = [np.zeros(0, np.int64)] * world
        self.calls = 0

    def of_rank(self, rank: int):
        def exchange(values: np.ndarray) -> list[np.ndarray]:
            self.slots[rank] = values.copy()
            self.barrier.wait()
            got = list(self.slots)
            if rank == 0:
                self.calls += 1
            self.barrier.wait()  # nobody overwrites a slot before all have read it
            return got
        return exchange


def _across(graph: FileGraph, world: int, num_parts: int = 4,
            **options) -> tuple[list[np.ndarray], int]:
    """Every rank's book and the number of rounds it took."""
    gather = _AllGather(world)
    books: list = [None] * world
    errors: list = []

    def rank(r: int) -> None:
        try:
            stream = EdgeStream(graph, 2000, r, world, gather.of_rank(r))
            books[r] = np.asarray(StreamingPartitioner(**options).assign_stream(stream,
                                                                                 num_parts))
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test
            errors.append(exc)
            gather.barrier.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return books, gather.calls


def _cut(graph: FileGraph, book: np.ndarray) -> float:
    cut = total = 0
    for src, dst in graph.view_chunks(10_000):
        cut += int(np.count_nonzero(book[src] != book[dst]))
        total += src.size
    return cut / total


def test_rank_chunks_split_the_edges_between_the_ranks_in_order(tmp_path):
    graph = _blocks(tmp_path, files=5)
    whole = np.concatenate([s for s, _ in EdgeStream(graph, 777).chunks()])
    shares = [np.concatenate([s for s, _ in EdgeStream(graph, 777, r, 3).rank_chunks()])
              for r in range(3)]
    assert [s.size for s in shares] == [8000, 16000, 16000]  # files 0 | 1-2 | 3-4
    assert np.array_equal(np.concatenate(shares), whole)
    # One host: its share is everything, and exchange hands back its own.
    one = EdgeStream(graph, 777)
    assert np.array_equal(np.concatenate([s for s, _ in one.rank_chunks()]), whole)
    assert [a.tolist() for a in one.exchange(np.array([3, 1]))] == [[3, 1]]


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_ends_with_the_same_balanced_book_every_run(tmp_path, monkeypatch, world):
    import pyg_dist_plugins.partitioners.streaming as streaming

    monkeypatch.setattr(streaming, "ROUND_NODES", 100)  # rounds inside a chunk too
    graph = _blocks(tmp_path)
    books, rounds = _across(graph, world)
    assert all(np.array_equal(books[0], b) for b in books[1:])
    again, _ = _across(graph, world)
    assert np.array_equal(books[0], again[0])
    # 3 passes over the largest share (two files of 10,000 edges: 10 chunks
    # of 2,000): more rounds than chunks.
    assert rounds > 3 * 10
    counts = np.bincount(books[0].astype(np.int64), minlength=4)
    assert counts.sum() == NUM_NODES and counts.max() <= 1.05 * NUM_NODES / 4 + world
    train = np.load(tmp_path / "nodes" / "train_mask.npy")
    train_counts = np.bincount(books[0][train].astype(np.int64), minlength=4)
    assert train_counts.max() <= 1.05 * train.sum() / 4 + world


def test_across_ranks_cuts_fewer_edges_than_hash_and_about_what_one_host_cuts(tmp_path):
    graph = _blocks(tmp_path)
    books, _ = _across(graph, 2)
    one_host = StreamingPartitioner().assign_stream(EdgeStream(graph, 2000), 4)
    hashed = HashPartitioner().assign_stream(EdgeStream(graph, 2000), 4)
    across, alone, hashed_cut = _cut(graph, books[0]), _cut(graph, one_host), \
        _cut(graph, hashed)
    # Measured: 0.266 across two ranks, 0.134 on one host, 0.73 with hash
    # (0.437 and 0.438 before the neighbour counts: a rank counts the
    # neighbours its own share of the edges shows it, half of them here).
    assert across <= 0.5 * hashed_cut and alone <= across, (across, alone, hashed_cut)


def test_a_malformed_round_is_refused(tmp_path):
    from pyg_dist.errors import InvalidPartitionArgumentError

    graph = _blocks(tmp_path)

    def lying(values: np.ndarray) -> list[np.ndarray]:
        return [values, np.array([1, 5, NUM_NODES + 3, 0, 1], np.int64)]  # a node past n

    stream = EdgeStream(graph, 2000, 0, 2, lying)
    with pytest.raises(InvalidPartitionArgumentError, match="malformed round"):
        StreamingPartitioner().assign_stream(stream, 4)


@pytest.mark.parametrize("num_nodes", [1_000, 1 << 40])  # packed ids; too wide to pack
def test_a_chunk_is_grouped_by_node_with_every_neighbour_once(num_nodes):
    # streaming counts a node's neighbours' parts, so their order within
    # the node's segment is free; the multiset must be exact, both ways,
    # self loops aside.
    rng = np.random.default_rng(5)
    src = rng.integers(0, min(num_nodes, 1_000), 5_000)
    dst = rng.integers(0, min(num_nodes, 1_000), 5_000)
    if num_nodes > 1_000:
        src[::7] = num_nodes - 1 - src[::7]  # ids near the top of the range
    dst[::11] = src[::11]  # self loops
    u, v = _grouped(src, dst, num_nodes)
    assert np.all(u[1:] >= u[:-1])
    got = sorted(zip(u.tolist(), v.tolist()))
    both = zip(np.concatenate([src, dst]).tolist(), np.concatenate([dst, src]).tolist())
    assert got == sorted((a, b) for a, b in both if a != b)
