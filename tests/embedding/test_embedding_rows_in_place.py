"""A table's rows travel like feature rows: same-host servers write them
straight into the trainer's output segment (``emb_read`` with ``place``),
a batch's features and embedding rows go out in one round trip, and a
placed read that names the wrong rows, dtype or width is refused."""

from __future__ import annotations

import pytest
import torch
from support.shm_files import needs_shm
from torch_geometric.data import TensorAttr

from pyg_dist.embedding import DistEmbedding
from pyg_dist.errors import EmbeddingError, RemoteError
from pyg_dist.rpc import RpcConfig
from pyg_dist.store.connect import connect

pytestmark = needs_shm
DIM = 16


def _in_pool(tensor, pool):
    ptr = tensor.data_ptr()
    return any(s.payload.data_ptr() <= ptr < s.payload.data_ptr() + s.size for s in pool._all)


def _lent_reply_bytes(fs):
    return sum(p.held_bytes for p in fs.router.client.transport._lender._pools.values())


def test_same_host_servers_write_the_rows_into_the_batch(served, cora_data):
    fs, gs = served[2]
    emb = DistEmbedding((fs, gs), "in-place", DIM, init=lambda ids: ids.view(-1, 1)
                        * torch.ones(1, DIM), attr_name="in_place")
    ids = torch.randperm(fs.num_nodes, generator=torch.Generator().manual_seed(1))[:1500]
    copied = fs.router.copied_rows
    lent = _lent_reply_bytes(fs)
    x, rows = fs.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "in_place",
                                                                          ids)])
    assert torch.equal(x, cora_data.x[ids])
    assert torch.equal(rows.detach(), ids.view(-1, 1) * torch.ones(1, DIM))
    assert rows.requires_grad and rows.is_leaf  # distinct ids: the rows are the leaf
    assert _in_pool(rows, fs.router._outputs) and fs.router.copied_rows == copied
    assert _lent_reply_bytes(fs) == lent  # nothing came through a reply
    # Over TCP alone the same rows arrive.
    tcp, tgs = connect(fs.router.endpoints, RpcConfig(shared_memory_bytes=0))
    try:
        again = DistEmbedding((tcp, tgs), "in-place", DIM, init=lambda i: None)
        assert torch.equal(again.read(ids), rows.detach())
        assert torch.equal(again(torch.cat([ids[:5], ids[:5]])).detach(),
                           torch.cat([rows[:5], rows[:5]]).detach())
    finally:
        tcp.close()
    emb.zero_grad()


def test_a_read_expecting_another_layout_is_refused(served):
    fs, gs = served[2]
    DistEmbedding((fs, gs), "layout", DIM, init="zeros")
    owned = fs.router.book_of(None).owned(0)[:3]
    for args, refused in (({"dtype": "bfloat16"}, "EmbeddingError"),
                          ({"dim": DIM + 1}, "EmbeddingError"),
                          ({"dim": True}, "ProtocolError")):  # no dim: refused by its type
        with pytest.raises(RemoteError) as info:
            fs.router.client.call(0, "emb_read", {"name": "layout", **args}, [owned])
        assert info.value.remote_type == refused, args
    with pytest.raises(RemoteError) as info:  # a place naming no segment this server has
        fs.router.client.call(0, "emb_read", {"name": "layout", "place": {
            "shm": {"name": "nope"}, "offsets": [0], "rows": 3}},
            [owned, torch.arange(3)])
    with pytest.raises(RemoteError) as info:  # a place without the output rows
        fs.router.client.call(0, "emb_read", {"name": "layout", "place": {}}, [owned])
    assert info.value.remote_type == "ProtocolError"
    assert fs.router.client.call(0, "emb_read", {"name": "layout"}, [owned]).tensors[0] \
        .shape == (3, DIM)
    with pytest.raises(EmbeddingError):  # the trainer's side says it too
        DistEmbedding((fs, gs), "layout", DIM + 1, init="zeros")
