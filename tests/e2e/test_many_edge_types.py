"""A heterogeneous graph with 1,000 edge types samples, hop by hop and with
server hops, exactly as PyG's NeighborLoader at full fan-out. A reply carries
3 tensors per edge type: the limit on a reply's tensors comes from its
request, not a constant of 64 that refused the answer after the server had
computed it (22 edge types and more failed before)."""

from __future__ import annotations

import pytest
import torch
from support.servers import serve_parts
from torch_geometric.data import HeteroData
from torch_geometric.loader import NeighborLoader

from pyg_dist.loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.protocol.ops import SAMPLE
from pyg_dist.store.connect import connect

NODE_TYPES = 10
EDGE_TYPES = 1000
NODES = 30


def _graph() -> HeteroData:
    gen = torch.Generator().manual_seed(3)
    data = HeteroData()
    for t in range(NODE_TYPES):
        data[f"n{t}"].x = torch.randn(NODES, 4, generator=gen)
    for i in range(EDGE_TYPES):
        src, dst = f"n{i % NODE_TYPES}", f"n{(7 * i + 3) % NODE_TYPES}"
        data[src, f"r{i}", dst].edge_index = torch.randint(0, NODES, (2, 3), generator=gen)
    return data


def _edges(batch, edge_type) -> set[tuple[int, int, int]]:
    src, _, dst = edge_type
    row, col = batch[edge_type].edge_index
    return set(zip(batch[src].n_id[row].tolist(), batch[dst].n_id[col].tolist(),
                   batch[edge_type].e_id.tolist()))


def test_the_reply_limit_follows_the_request():
    edge_types = [["a", "r", "b"]] * EDGE_TYPES
    assert SAMPLE.reply_tensor_limit({"edge_types": edge_types}) == 3 * EDGE_TYPES
    assert SAMPLE.reply_tensor_limit({"edge_types": [None]}) == 64
    assert SAMPLE.reply_tensor_limit({"edge_types": "x" * 10**6}) == 64


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("server_hops", [False, True], ids=["hop_by_hop", "server_hops"])
def test_a_thousand_edge_types_sample_like_pyg(tmp_path_factory, server_hops):
    data = _graph()
    root = tmp_path_factory.mktemp("many-types") / "parts"
    partition(data, 2, str(root), partitioner="random")
    seeds = torch.arange(NODES)
    ref = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=("n0", seeds),
                         batch_size=10)
    with serve_parts(root, forwarding=True) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            dist = DistNeighborLoader((fs, gs), num_neighbors=[-1, -1],
                                      input_nodes=("n0", seeds), batch_size=10,
                                      server_hops=server_hops)
            batches = list(zip(ref, dist))
        finally:
            fs.close()
    assert len(batches) == len(ref) == 3
    for a, b in batches:
        for node_type in data.node_types:
            assert set(b[node_type].n_id.tolist()) == set(a[node_type].n_id.tolist())
        for edge_type in data.edge_types:
            assert _edges(b, edge_type) == _edges(a, edge_type), edge_type
