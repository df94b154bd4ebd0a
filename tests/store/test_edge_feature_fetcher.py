"""``EdgeFeatureFetcher`` against real servers: rows of edge attributes by
global edge id, exactly the input graph's, over 2 and 3 parts, through the
socket and through shared memory, heterogeneous graphs per edge type,
answers split within the servers' reply limits, and typed errors."""

from __future__ import annotations

import threading

import pytest
import torch
from support.edge_graphs import BARE, hetero_graph, homo_graph
from support.servers import serve_parts

import pyg_dist
from pyg_dist.errors import RemoteError, StoreError
from pyg_dist.routing.id_router import Router
from pyg_dist.routing.row_fetch import fetch_rows
from pyg_dist.rpc import RpcConfig
from pyg_dist.server import PartitionServer
from pyg_dist.store.edge_fetch import EdgeFeatureFetcher, EdgeFeatureInfo

ATTRS = ["edge_attr", "edge_weight", "edge_time"]


@pytest.fixture(scope="module")
def homo():
    return homo_graph()


@pytest.fixture(scope="module")
def roots(homo, tmp_path_factory):
    """The graph in 2 parts (random partitioner) and 3 parts (metis)."""
    out = {}
    for num_parts, partitioner in ((2, "random"), (3, "metis")):
        root = tmp_path_factory.mktemp("edge-fetch") / f"homo-{num_parts}"
        pyg_dist.partition(homo, num_parts, root, partitioner)
        out[num_parts] = root
    return out


@pytest.fixture(scope="module")
def clusters(roots):
    with serve_parts(roots[2]) as two, serve_parts(roots[3]) as three:
        yield {2: two.endpoints, 3: three.endpoints}


def _router(endpoints, config=None):
    return Router(endpoints, None, 0, config)


def _fetch(fetcher, edge_type, edge_ids, names):
    """The rows as the remote feature store fetches them (a malformed reply
    is a StoreError, a server's failure an RpcError)."""
    request = fetcher.row_request(edge_type, edge_ids, names)
    fetch_rows(fetcher.router, [request], fetcher.timeout)
    return request.outs


def _metas(router):
    return [router.client.call(part, "meta").result for part in range(router.num_parts)]


def _expected_book(root, edge_type=None):
    from pyg_dist.partitioning import PartitionReader

    reader = PartitionReader(root)
    book = torch.full((reader.num_edges_of(edge_type),), -1, dtype=torch.long)
    for part in range(reader.num_parts):
        book[reader.load_edges(edge_type, part, features=False).edge_ids] = part
    return book


@pytest.mark.parametrize("num_parts", [2, 3])
@pytest.mark.parametrize("shared_memory", [0, 256 << 20], ids=["socket", "shared-memory"])
def test_rows_are_the_input_graph_s_in_the_caller_s_order(homo, roots, clusters, num_parts,
                                                          shared_memory):
    router = _router(clusters[num_parts], RpcConfig(shared_memory_bytes=shared_memory))
    try:
        fetcher = EdgeFeatureFetcher.from_meta(router, _metas(router))
        assert fetcher.edge_types == [None]
        assert fetcher.info(None, "edge_attr") == EdgeFeatureInfo(torch.float32, (4,))
        num_edges = homo.edge_index.size(1)
        generator = torch.Generator().manual_seed(num_parts)
        # Every edge once, in a random order; then batches with repeats,
        # big enough (>= 64 KiB a part) to be lent shared memory for.
        big = torch.randint(num_edges, (30_000,), generator=generator)
        for ids in (torch.randperm(num_edges, generator=generator),
                    torch.randint(num_edges, (3000,), generator=generator), big, big, big):
            rows = _fetch(fetcher, None, ids, ATTRS)
            for name, tensor in zip(ATTRS, rows):
                assert tensor.dtype == homo[name].dtype
                assert torch.equal(tensor, homo[name][ids]), name
        pools = [router.client.transport._lender.pool(part) for part in range(num_parts)]
        if shared_memory:
            assert all(p.disabled is None and p.held_bytes > 0 for p in pools)
        else:
            assert all(p.held_bytes == 0 for p in pools)
        assert torch.equal(fetcher.book(None).long(), _expected_book(roots[num_parts]))
        assert fetcher.book(None).dtype == torch.int8
        one, = _fetch(fetcher, None, torch.tensor([5], dtype=torch.int32), ["edge_time"])
        assert torch.equal(one, homo.edge_time[5:6])
        empty, = _fetch(fetcher, None, torch.empty(0, dtype=torch.long), ["edge_attr"])
        assert empty.shape == (0, 4)
    finally:
        router.close()


def test_every_owner_gets_one_request_at_once(homo, clusters):
    router = _router(clusters[3])
    calls = []
    real = router.call_all

    def counting(requests, **kwargs):
        calls.append([(part, op) for part, op, _, _ in requests])
        return real(requests, **kwargs)

    router.call_all = counting
    try:
        fetcher = EdgeFeatureFetcher.from_meta(router, _metas(router))
        ids = torch.randperm(homo.edge_index.size(1))[:500]
        _fetch(fetcher, None, ids, ["edge_attr"])
        _fetch(fetcher, None, ids, ["edge_weight"])
        # The book once (one edge_ids per part, no limit hit), then one
        # get_edges per owner per fetch.
        assert calls[0] == [(0, "edge_ids"), (1, "edge_ids"), (2, "edge_ids")]
        assert calls[1] == calls[2] == [(0, "get_edges"), (1, "get_edges"), (2, "get_edges")]
        assert len(calls) == 3
    finally:
        router.close()


def test_the_book_is_built_once_by_concurrent_first_fetches(homo, clusters):
    router = _router(clusters[2])
    books = []
    real = router.call_all

    def counting(requests, **kwargs):
        books.extend(part for part, op, _, _ in requests if op == "edge_ids")
        return real(requests, **kwargs)

    router.call_all = counting
    try:
        fetcher = EdgeFeatureFetcher.from_meta(router, _metas(router))
        ids = torch.arange(0, homo.edge_index.size(1), 7)
        results, errors = [], []

        def fetch():
            try:
                results.append(_fetch(fetcher, None, ids, ["edge_attr"])[0])
            except Exception as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=fetch) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors and len(results) == 8
        assert all(torch.equal(r, homo.edge_attr[ids]) for r in results)
        assert sorted(books) == [0, 1]
    finally:
        router.close()


@pytest.fixture(scope="module")
def small_limit_servers(roots):
    """Both parts of the 2-part graph, in-process, with a reply limit of 64
    rows of all three attributes (so also edge_ids pages of 224 ids)."""
    config = RpcConfig(workers=1, max_reply_bytes=64 * (16 + 4 + 8))
    servers = [PartitionServer(roots[2], part, config=config) for part in range(2)]
    try:
        yield [server.start() for server in servers]
    finally:
        for server in servers:
            server.stop()


@pytest.mark.parametrize("shared_memory", [0, 256 << 20], ids=["socket", "shared-memory"])
def test_answers_over_the_reply_limit_are_split(homo, roots, small_limit_servers,
                                                shared_memory):
    router = _router(small_limit_servers, RpcConfig(shared_memory_bytes=shared_memory))
    try:
        metas = _metas(router)
        fetcher = EdgeFeatureFetcher.from_meta(router, metas)
        assert fetcher.reply_limits == [64 * 28, 64 * 28]
        before = [router.client.call(p, "stats").result["get_edges_calls"] for p in range(2)]
        ids = torch.randperm(homo.edge_index.size(1), generator=torch.Generator().manual_seed(4))
        rows = _fetch(fetcher, None, ids, ATTRS)
        for name, tensor in zip(ATTRS, rows):
            assert torch.equal(tensor, homo[name][ids]), name
        # The book came in pages of 224 ids, and is right.
        assert torch.equal(fetcher.book(None).long(), _expected_book(roots[2]))
        after = [router.client.call(p, "stats").result["get_edges_calls"] for p in range(2)]
        stored = [router.client.call(p, "edge_ids", {"count": 0}).result["total"]
                  for p in range(2)]
        assert [a - b for a, b in zip(after, before)] == [-(-n // 64) for n in stored]
        # Fewer attributes per row: more rows per call.
        _fetch(fetcher, None, ids, ["edge_weight"])
        again = [router.client.call(p, "stats").result["get_edges_calls"] for p in range(2)]
        assert [a - b for a, b in zip(again, after)] == [-(-n // (64 * 7)) for n in stored]
    finally:
        router.close()


def test_unknown_types_attributes_and_bad_ids_are_typed_errors(homo, clusters):
    router = _router(clusters[2])
    try:
        fetcher = EdgeFeatureFetcher.from_meta(router, _metas(router))
        ids = torch.arange(10)
        with pytest.raises(StoreError, match=r"no edge type \('a', 'b', 'c'\)"):
            _fetch(fetcher, ("a", "b", "c"), ids, ["edge_attr"])
        with pytest.raises(StoreError, match=r"no edge attribute\(s\) \['x'\]"):
            _fetch(fetcher, None, ids, ["edge_attr", "x"])
        with pytest.raises(StoreError, match="non-empty list"):
            _fetch(fetcher, None, ids, "edge_attr")
        with pytest.raises(StoreError, match="non-empty list"):
            _fetch(fetcher, None, ids, [])
        num_edges = homo.edge_index.size(1)
        with pytest.raises(StoreError, match=rf"must lie in \[0, {num_edges}\)"):
            _fetch(fetcher, None, torch.tensor([0, num_edges]), ["edge_attr"])
        with pytest.raises(StoreError, match=rf"must lie in \[0, {num_edges}\)"):
            _fetch(fetcher, None, torch.tensor([-1]), ["edge_attr"])
        with pytest.raises(StoreError, match="1-D integer tensor"):
            _fetch(fetcher, None, ids.view(2, 5), ["edge_attr"])
        with pytest.raises(StoreError, match="1-D integer tensor"):
            _fetch(fetcher, None, ids.float(), ["edge_attr"])
        with pytest.raises(StoreError, match="1-D integer tensor"):
            _fetch(fetcher, None, [1, 2], ["edge_attr"])
        with pytest.raises(StoreError, match="an edge type is None"):
            _fetch(fetcher, "rel", ids, ["edge_attr"])
        # Still serving, and right, after every refusal.
        assert torch.equal(_fetch(fetcher, None, ids, ["edge_attr"])[0], homo.edge_attr[ids])
    finally:
        router.close()


def test_a_server_refusal_reaches_the_caller_typed(homo, clusters):
    # A fetcher told of an attribute the servers do not hold (an older
    # meta, a hand-built spec) gets the server's StoreError, not a hang.
    router = _router(clusters[2])
    try:
        fetcher = EdgeFeatureFetcher(router, {None: {"edge_x": EdgeFeatureInfo(torch.float32,
                                                                              (2,))}},
                                     {None: homo.edge_index.size(1)})
        with pytest.raises(StoreError, match="unknown edge attribute") as info:
            _fetch(fetcher, None, torch.arange(50), ["edge_x"])
        assert isinstance(info.value, RemoteError)
    finally:
        router.close()


def test_a_meta_without_edge_attributes_serves_none(clusters):
    router = _router(clusters[2])
    try:
        metas = [{k: v for k, v in m.items() if k != "edge_features"} for m in _metas(router)]
        fetcher = EdgeFeatureFetcher.from_meta(router, metas)
        assert fetcher.attrs() == []
        with pytest.raises(StoreError, match="its edges hold none"):
            _fetch(fetcher, None, torch.arange(3), ["edge_attr"])
    finally:
        router.close()


@pytest.fixture(scope="module")
def hetero():
    return hetero_graph()


@pytest.fixture(scope="module")
def hetero_root(hetero, tmp_path_factory):
    root = tmp_path_factory.mktemp("edge-fetch") / "hetero-3"
    pyg_dist.partition(hetero, 3, root, "metis")
    return root


def test_hetero_rows_per_edge_type(hetero, hetero_root):
    with serve_parts(hetero_root) as cluster:
        router = _router(cluster.endpoints)
        try:
            fetcher = EdgeFeatureFetcher.from_meta(router, _metas(router))
            assert fetcher.edge_types == hetero.edge_types
            generator = torch.Generator().manual_seed(5)
            for k, edge_type in enumerate(hetero.edge_types):
                num_edges = hetero[edge_type].edge_index.size(1)
                ids = torch.randint(num_edges, (2 * num_edges,), generator=generator)
                if k == BARE:
                    with pytest.raises(StoreError, match="its edges hold none"):
                        _fetch(fetcher, edge_type, ids, ["edge_attr"])
                    continue
                names = ["edge_attr", "edge_weight"] if k % 2 else ["edge_attr"]
                rows = _fetch(fetcher, list(edge_type), ids, names)
                for name, tensor in zip(names, rows):
                    assert torch.equal(tensor, hetero[edge_type][name][ids]), (edge_type, name)
                assert torch.equal(fetcher.book(edge_type).long(),
                                   _expected_book(hetero_root, edge_type))
            with pytest.raises(StoreError, match="no edge type None"):
                _fetch(fetcher, None, torch.arange(3), ["edge_attr"])
        finally:
            router.close()
