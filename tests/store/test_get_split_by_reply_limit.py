"""A ``get`` whose answer is over a server's reply limit is split by the
trainer's feature store into calls within it (servers report the limit in
``meta``), over the socket and through shared memory alike."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import EdgeAttr, TensorAttr

from pyg_dist.rpc import RpcConfig
from pyg_dist.server import PartitionServer
from pyg_dist.store.connect import connect

ROW_BYTES = 1433 * 4 + 8  # Cora's x (float32) and y (int64)


def _serve(root: str, config: RpcConfig):
    """Serves both parts in-process with ``config``; yields their endpoints."""
    servers = [PartitionServer(root, part, config=config) for part in range(2)]
    try:
        yield [server.start() for server in servers]
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="module")
def small_limit_servers(cora2_root):
    """Each part served with a reply limit of 100 rows."""
    yield from _serve(cora2_root, RpcConfig(workers=1, max_reply_bytes=100 * ROW_BYTES))


@pytest.mark.parametrize("shared_memory", [0, 256 << 20], ids=["socket", "shared-memory"])
def test_a_get_over_the_reply_limit_is_split_and_correct(data, small_limit_servers,
                                                         shared_memory):
    ids = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))[:1500]
    fs, _ = connect(small_limit_servers, RpcConfig(shared_memory_bytes=shared_memory))
    with fs:
        x, y = fs.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "y", ids)])
    # ~750 rows per server, 100 per call: before, one call per server and
    # a 'reply limit' error.
    assert torch.equal(x, data.x[ids])
    assert torch.equal(y, data.y[ids])


@pytest.fixture(scope="module")
def tight_budget_servers(cora2_root):
    """The same, with each client's reply budget at its smallest allowed value
    (4 x the reply limit): a split ``get`` sends more chunks at once than the
    server will hold answers for."""
    limit = 100 * ROW_BYTES
    yield from _serve(cora2_root, RpcConfig(workers=2, max_reply_bytes=limit,
                                            client_reply_budget=4 * limit))


@pytest.mark.parametrize("shared_memory", [0, 256 << 20], ids=["socket", "shared-memory"])
def test_a_busy_server_is_asked_again_not_failed(data, tight_budget_servers, shared_memory):
    # ~1,350 rows per server in calls of 100: more answers at once than the
    # budget holds, so some calls are refused with ServerBusyError before
    # anything is computed. The store asks again after a pause (back-pressure)
    # instead of failing the batch.
    ids = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(1))
    fs, _ = connect(tight_budget_servers, RpcConfig(shared_memory_bytes=shared_memory))
    with fs:
        for _ in range(3):
            x, y = fs.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "y", ids)])
            assert torch.equal(x, data.x[ids])
            assert torch.equal(y, data.y[ids])


def test_the_whole_edge_index_comes_in_pages_within_the_reply_limit(data, small_limit_servers):
    # A limit of ~24k edges' worth: each part's ~5k edges take one page, so
    # also with a limit of 1,000 edges (several pages per part), the COO the
    # graph store assembles is Cora's, in global edge-id order.
    fs, gs = connect(small_limit_servers)
    with fs:
        gs._reply_limits = [1000 * 24] * len(gs._reply_limits)
        row, col = gs.get_edge_index(EdgeAttr(None, "coo"))
    assert torch.equal(row, data.edge_index[0]) and torch.equal(col, data.edge_index[1])


def test_an_edge_index_page_is_the_part_s_csc_slice(data, small_limit_servers):
    from pyg_dist.rpc import RpcClient

    with RpcClient(small_limit_servers[:1]) as client:
        whole = client.call(0, "edge_index", {"edge_type": None, "start": 0, "count": 1 << 40})
        total = whole.result["total"]
        pages = [client.call(0, "edge_index", {"edge_type": None, "start": s, "count": 777})
                 for s in range(0, total, 777)]
        past = client.call(0, "edge_index", {"edge_type": None, "start": total, "count": 5})
    for i in range(3):
        assert torch.equal(torch.cat([p.tensors[i] for p in pages]), whole.tensors[i])
    assert all(t.numel() == 0 for t in past.tensors)
    assert whole.tensors[0].numel() == total
