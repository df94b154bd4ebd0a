"""The in-server stores over a real partitioned Cora, through the registered
``memory`` and ``mmap`` store plugins."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import TensorAttr

import pyg_dist
from pyg_dist.datasets import cora
from pyg_dist.errors import StoreError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.plugins import default_registry
from pyg_dist.store.local import PartitionFeatureStore, local_rows


@pytest.fixture(scope="module")
def graph():
    return cora()


@pytest.fixture(scope="module")
def reader(graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("stores") / "cora"
    pyg_dist.partition(graph, 2, root, "metis")
    return PartitionReader(root)


@pytest.fixture(params=["memory", "mmap"])
def kind(request):
    return request.param


def test_feature_store_serves_local_rows(graph, reader, kind):
    fs = default_registry.feature_store(kind)(reader, 1)
    node_ids = reader.load_part(1, topology=False, features=False).node_ids
    rows = torch.tensor([0, 5, 3, node_ids.numel() - 1])
    assert torch.equal(fs.get_tensor(None, "x", rows), graph.x[node_ids[rows]])
    assert torch.equal(fs[None, "y", rows], graph.y[node_ids[rows]])
    assert torch.equal(fs.get_tensor(None, "train_mask", None), graph.train_mask[node_ids])
    assert torch.equal(fs.get_tensor(TensorAttr(None, "x", slice(2, 4))),
                       graph.x[node_ids[2:4]])
    got = fs.multi_get_tensor([TensorAttr(None, "x", rows), TensorAttr(None, "y", rows)])
    assert torch.equal(got[1], graph.y[node_ids[rows]])
    assert fs.get_tensor_size(None, "x") == (node_ids.numel(), 1433)
    assert fs.get_tensor_size(None, "nope") is None
    names = sorted(a.attr_name for a in fs.get_all_tensor_attrs())
    assert names == ["test_mask", "train_mask", "val_mask", "x", "y"]
    assert all(a.group_name is None for a in fs.get_all_tensor_attrs())


def test_feature_store_errors(reader, kind):
    fs = default_registry.feature_store(kind)(reader, 0)
    with pytest.raises(StoreError, match="no feature 'nope'"):
        fs.get_tensor(None, "nope", None)
    with pytest.raises(StoreError, match="out of range"):
        fs.get_tensor(None, "x", torch.tensor([10**6]))
    with pytest.raises(StoreError, match="no options"):
        default_registry.feature_store(kind)(reader, 0, cache=True)


def test_feature_store_put_update_remove():
    fs = PartitionFeatureStore()
    fs.put_tensor(torch.zeros(4, 2), None, "h", None)
    fs.put_tensor(torch.ones(2, 2), None, "h", torch.tensor([1, 3]))
    assert fs.get_tensor(None, "h", None)[:, 0].tolist() == [0, 1, 0, 1]
    assert fs.remove_tensor(None, "h", None) and not fs.remove_tensor(None, "h", None)


def test_mmap_writes_do_not_reach_the_files(reader):
    fs = default_registry.feature_store("mmap")(reader, 0)
    x = fs.get_tensor(None, "x", None)
    x[0] += 1  # copy-on-write mapping: the file stays intact
    PartitionReader(reader.root).verify_all()


def test_graph_store_csc_is_the_parts_incoming_edges(graph, reader, kind):
    gs = default_registry.graph_store(kind)(reader, 0)
    node_ids = gs.node_ids(None)
    row, colptr = gs.get_edge_index(None, "csc")
    edge_ids = gs.get_edge_ids(None)
    assert colptr.numel() == node_ids.numel() + 1 and row.numel() == edge_ids.numel()
    dst = torch.repeat_interleave(node_ids, colptr.diff())
    assert torch.equal(graph.edge_index[0, edge_ids], row)
    assert torch.equal(graph.edge_index[1, edge_ids], dst)
    # Every incoming edge of an owned node is here.
    owned = torch.zeros(graph.num_nodes, dtype=torch.bool)
    owned[node_ids] = True
    assert row.numel() == int(owned[graph.edge_index[1]].sum())
    coo_row, coo_col = gs.get_edge_index(None, "coo")
    assert torch.equal(coo_row, row) and torch.equal(coo_col, dst)
    (attr,) = gs.get_all_edge_attrs()
    assert attr.edge_type is None and attr.size == (graph.num_nodes, node_ids.numel())


def test_graph_store_lookups_and_errors(reader, kind):
    gs = default_registry.graph_store(kind)(reader, 0)
    ids = gs.node_ids()
    assert torch.equal(local_rows(ids, ids[[4, 0, 2]]), torch.tensor([4, 0, 2]))
    foreign = reader.book.owned(1)[:1]
    with pytest.raises(StoreError, match="not owned"):
        local_rows(ids, foreign)
    with pytest.raises(StoreError, match="no edge type"):
        gs.get_edge_ids(("a", "b", "c"))
    with pytest.raises(StoreError, match="csr"):
        gs.get_edge_index(None, "csr")


def test_local_rows():
    ids = torch.tensor([2, 5, 9])
    assert local_rows(ids, torch.tensor([9, 2])).tolist() == [2, 0]
    with pytest.raises(StoreError):
        local_rows(ids, torch.tensor([10]))
    with pytest.raises(StoreError):
        local_rows(torch.empty(0, dtype=torch.long), torch.tensor([1]))
