"""Unit tests of the stores and the sampler over in-process partition
handlers (:mod:`support.in_process`): the real handlers and op declarations,
no sockets. What the transport adds is tested on real servers elsewhere."""

from __future__ import annotations

import pytest
import torch
from support.in_process import in_process_stores
from torch_geometric.data import TensorAttr
from torch_geometric.loader import NeighborLoader

import pyg_dist
from pyg_dist.errors import RemoteError, StoreError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader


@pytest.fixture(scope="module")
def stores(cora_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("in-process") / "cora-3"
    pyg_dist.partition(cora_data, 3, root, partitioner="metis")
    fs, gs, client = in_process_stores(root, 3)
    yield fs, gs, client
    fs.close()


def test_feature_rows_come_back_in_the_asked_order_from_every_part(stores, cora_data):
    fs, _, client = stores
    ids = torch.randperm(2708, generator=torch.Generator().manual_seed(0))[:500]
    before = client.calls.copy()
    x, y = fs.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "y", ids)])
    assert torch.equal(x, cora_data.x[ids]) and torch.equal(y, cora_data.y[ids])
    asked = client.calls - before
    # One request per part for both attributes, whatever the ids' order.
    assert sum(asked.values()) == 3 and {part for part, _ in asked} == {0, 1, 2}


def test_in_degrees_add_up_over_the_parts(stores, cora_data):
    _, gs, _ = stores
    expected = torch.bincount(cora_data.edge_index[1], minlength=2708)
    assert torch.equal(gs.in_degree(), expected)


def test_full_fanout_batches_equal_pyg_neighbor_loader(stores, cora_data):
    fs, gs, _ = stores
    seeds = torch.arange(0, 2708, 37)
    ref = NeighborLoader(cora_data, num_neighbors=[-1, -1], input_nodes=seeds, batch_size=40)
    dist = DistNeighborLoader((fs, gs), num_neighbors=[-1, -1], input_nodes=seeds,
                              batch_size=40)
    batches = 0
    for a, b in zip(ref, dist):
        batches += 1
        assert set(b.n_id.tolist()) == set(a.n_id.tolist())
        order = torch.argsort(b.n_id)
        assert torch.equal(b.x[order], a.x[torch.argsort(a.n_id)])
        src, dst = b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]]
        ref_src, ref_dst = a.n_id[a.edge_index[0]], a.n_id[a.edge_index[1]]
        assert set(zip(src.tolist(), dst.tolist(), b.e_id.tolist())) == \
            set(zip(ref_src.tolist(), ref_dst.tolist(), a.e_id.tolist()))
    assert batches == len(ref) == 2


def test_a_handlers_refusal_reaches_the_caller_as_its_typed_twin(stores):
    fs, _, _ = stores
    with pytest.raises(StoreError, match="secret"):  # not served: refused before any call
        fs.get_tensor(TensorAttr(None, "secret", torch.tensor([0])))
    _, gs, _ = stores
    with pytest.raises(RemoteError) as info:
        gs.check_sample_attributes("no_such_weight", None, "uniform")
    assert info.value.remote_type in ("StoreError", "SamplerError", "ProtocolError")
    assert "no_such_weight" in str(info.value)
