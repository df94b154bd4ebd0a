"""RemoteFeatureStore / RemoteGraphStore against PyG's FeatureStore/GraphStore semantics."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import EdgeAttr, TensorAttr
from torch_geometric.index import index2ptr
from torch_geometric.loader import NeighborLoader
from torch_geometric.utils import index_sort

from pyg_dist.errors import StoreError
from pyg_dist.store.connect import SERVERS_ENV, connect
from pyg_dist.store.remote_feature_store import RemoteFeatureStore
from pyg_dist.store.remote_graph_store import RemoteGraphStore


@pytest.fixture(scope="module")
def stores(endpoints):
    fs, gs = connect(list(reversed(endpoints)))  # any order works
    try:
        yield fs, gs
    finally:
        fs.close()


def test_connect_builds_pyg_stores_from_server_metadata(data, stores):
    fs, gs = stores
    assert isinstance(fs, RemoteFeatureStore) and isinstance(gs, RemoteGraphStore)
    assert fs.num_nodes == gs.num_nodes == 2708 and gs.num_edges == data.num_edges
    names = {attr.attr_name for attr in fs.get_all_tensor_attrs()}
    assert names == {"x", "y", "train_mask", "val_mask", "test_mask"}
    assert all(attr.group_name is None for attr in fs.get_all_tensor_attrs())


def test_connect_refuses_incomplete_or_repeated_servers(endpoints, monkeypatch):
    with pytest.raises(StoreError, match=r"no server for part\(s\) \[1\]"):
        connect([endpoints[0], endpoints[2]])
    with pytest.raises(StoreError, match="repeat"):
        connect([endpoints[0], endpoints[0], endpoints[1]])
    monkeypatch.delenv(SERVERS_ENV, raising=False)
    with pytest.raises(StoreError, match=SERVERS_ENV):
        connect()
    monkeypatch.setenv(SERVERS_ENV, ",".join(endpoints))
    with connect()[0] as fs:
        assert fs.num_nodes == 2708
    with pytest.raises(StoreError, match="closed"):
        fs.get_tensor(None, "y", torch.tensor([0]))


def test_get_tensor_with_every_kind_of_index(data, stores):
    fs, _ = stores
    idx = torch.tensor([2707, 0, 1500, 3, 1500])  # unordered, repeated, all parts
    assert torch.equal(fs.get_tensor(TensorAttr(None, "x", idx)), data.x[idx])
    assert torch.equal(fs[None, "y", idx], data.y[idx])
    assert torch.equal(fs.get_tensor(None, "y", None), data.y)
    assert torch.equal(fs[None, "x", slice(10, 20)], data.x[10:20])
    assert torch.equal(fs[None, "x", 5], data.x[5])
    assert torch.equal(fs[None, "train_mask", data.test_mask], data.train_mask[data.test_mask])
    assert fs[None, "x", torch.empty(0, dtype=torch.long)].shape == (0, 1433)
    view = fs.view(group_name=None)
    assert torch.equal(view.x[idx], data.x[idx])  # AttrView: group, then attr, then index
    assert torch.equal(fs[None, "y"](), data.y)


def test_multi_get_tensor_and_sizes(data, stores):
    fs, _ = stores
    idx = torch.randperm(2708, generator=torch.Generator().manual_seed(0))[:300]
    other = torch.tensor([7, 8])
    attrs = [TensorAttr(None, "x", idx), TensorAttr(None, "y", idx),
             TensorAttr(None, "val_mask", other)]
    x, y, mask = fs.multi_get_tensor(attrs)
    assert torch.equal(x, data.x[idx]) and torch.equal(y, data.y[idx])
    assert torch.equal(mask, data.val_mask[other])
    assert fs.get_tensor_size(None, "x") == (2708, 1433)
    assert fs.get_tensor_size(TensorAttr(None, "y", idx)) == (300,)
    assert fs.get_tensor_size(None, "nope") is None


def test_feature_store_is_read_only_and_refuses_bad_requests(stores):
    fs, _ = stores
    with pytest.raises(StoreError, match="read-only"):
        fs.put_tensor(torch.zeros(3), TensorAttr(None, "z", None))
    with pytest.raises(StoreError, match="read-only"):
        fs.remove_tensor(None, "x", None)
    with pytest.raises(StoreError, match="no feature 'nope'"):
        fs.get_tensor(None, "nope", torch.tensor([1]))
    with pytest.raises(StoreError, match="outside"):
        fs.get_tensor(None, "x", torch.tensor([0, 2708]))
    with pytest.raises(StoreError, match="integer"):
        fs.get_tensor(None, "x", torch.tensor([0.5]))
    with pytest.raises(ValueError, match="not fully specified"):
        fs.get_tensor(TensorAttr(None, "x"))


def test_graph_store_layouts(data, stores):
    _, gs = stores
    (attr,) = gs.get_all_edge_attrs()
    assert attr.edge_type is None and attr.size == (2708, 2708)
    row, col = gs.get_edge_index(EdgeAttr(None, "coo"))
    assert torch.equal(row, data.edge_index[0]) and torch.equal(col, data.edge_index[1])
    sorted_col, perm = index_sort(data.edge_index[1], max_value=2708, stable=True)
    csc_row, colptr = gs.get_edge_index(None, "csc")
    assert torch.equal(csc_row, data.edge_index[0][perm])
    assert torch.equal(colptr, index2ptr(sorted_col, 2708))
    rowptr, csr_col = gs.get_edge_index(None, "csr")
    assert int(rowptr[-1]) == data.num_edges
    assert torch.equal(torch.repeat_interleave(torch.arange(2708), rowptr.diff()),
                       data.edge_index[0].sort(stable=True).values)
    # PyG's own conversions go through get_edge_index and keep the permutation.
    row, colptr2, perm2 = gs.csc()
    assert torch.equal(colptr2, colptr) and torch.equal(data.edge_index[0][perm2], row)
    with pytest.raises(KeyError):
        gs.get_edge_index(("a", "to", "b"), "coo")
    with pytest.raises(KeyError):
        gs.get_edge_index(EdgeAttr(None, "coo", size=(5, 5)))
    with pytest.raises(StoreError, match="read-only"):
        gs.put_edge_index((row, col), EdgeAttr(None, "coo"))
    with pytest.raises(StoreError, match="read-only"):
        gs.remove_edge_index(EdgeAttr(None, "coo"))


def test_pyg_neighbor_loader_runs_over_the_remote_pair(data, stores):
    seeds = torch.arange(0, 2708, 31)
    ref = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=seeds, batch_size=40)
    remote = NeighborLoader(stores, num_neighbors=[-1, -1], input_nodes=seeds, batch_size=40)
    assert len(ref) == len(remote)
    for a, b in zip(ref, remote):
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.e_id, b.e_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
