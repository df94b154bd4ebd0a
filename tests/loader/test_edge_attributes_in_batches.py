"""Edge attributes reach the batches: at full fan-out every edge of a
DistNeighborLoader batch carries the same attribute rows as in PyG's
NeighborLoader on the unpartitioned graph (homogeneous and heterogeneous,
2 and 3 parts, prefetch 0 and 4), fetched in the batch's one round trip."""

from __future__ import annotations

import contextlib

import pytest
import torch
from support.edge_graphs import hetero_graph, homo_graph
from support.served_cora import ServedGraph
from torch_geometric.loader import NeighborLoader

import pyg_dist
from pyg_dist.loader import DistLinkNeighborLoader, DistNeighborLoader

HOMO_ATTRS = ("edge_attr", "edge_weight", "edge_time")


@pytest.fixture(scope="module")
def homo():
    return homo_graph()


@pytest.fixture(scope="module")
def hetero():
    return hetero_graph()


@pytest.fixture(scope="module")
def served(homo, hetero, tmp_path_factory):
    """Both graphs, partitioned and served per part count on first use."""
    workdir = tmp_path_factory.mktemp("edge-attrs")
    graphs = {"homo": ServedGraph(homo, workdir, "homo"),
              "hetero": ServedGraph(hetero, workdir, "hetero")}
    with contextlib.ExitStack() as stack:
        for graph in graphs.values():
            stack.enter_context(graph.stack)
        yield graphs


@pytest.fixture(params=[2, 3], ids=["2parts", "3parts"])
def homo_stores(request, served):
    return served["homo"].get(request.param)


@pytest.fixture(params=[2, 3], ids=["2parts", "3parts"])
def hetero_stores(request, served):
    return served["hetero"].get(request.param)


def edge_rows(store, n_id_src, n_id_dst, names) -> dict[tuple[int, int, int], tuple]:
    """``(src, dst, e_id)`` in global ids -> the edge's attribute rows."""
    row, col = store.edge_index
    keys = zip(n_id_src[row].tolist(), n_id_dst[col].tolist(), store.e_id.tolist())
    values = zip(*(store[name].tolist() for name in names))
    return dict(zip(keys, values))


@pytest.mark.parametrize("prefetch", [0, 4])
def test_homogeneous_edge_attributes_equal_pyg(homo, homo_stores, prefetch):
    seeds = torch.arange(0, homo.num_nodes, 4)
    ref = NeighborLoader(homo, num_neighbors=[-1, -1], input_nodes=seeds, batch_size=25)
    dist = DistNeighborLoader(homo_stores, num_neighbors=[-1, -1], input_nodes=seeds,
                              batch_size=25, prefetch=prefetch)
    batches = 0
    for a, b in zip(ref, dist):
        batches += 1
        for name in HOMO_ATTRS:
            assert b[name].dtype == homo[name].dtype and b[name].size(0) == b.e_id.numel()
            assert torch.equal(b[name], homo[name][b.e_id]), name
        assert edge_rows(b, b.n_id, b.n_id, HOMO_ATTRS) == \
            edge_rows(a, a.n_id, a.n_id, HOMO_ATTRS)
    assert batches == len(ref)


@pytest.mark.parametrize("prefetch", [0, 4])
def test_heterogeneous_edge_attributes_equal_pyg(hetero, hetero_stores, prefetch):
    seeds = torch.arange(0, hetero["v0"].num_nodes, 3)
    ref = NeighborLoader(hetero, num_neighbors=[-1, -1], input_nodes=("v0", seeds),
                         batch_size=20)
    dist = DistNeighborLoader(hetero_stores, num_neighbors=[-1, -1],
                              input_nodes=("v0", seeds), batch_size=20, prefetch=prefetch)
    for a, b in zip(ref, dist):
        for edge_type in hetero.edge_types:
            src, _, dst = edge_type
            names = [n for n in ("edge_attr", "edge_weight") if n in hetero[edge_type]]
            assert sorted(n for n in names if n in b[edge_type]) == names, edge_type
            for name in names:
                assert torch.equal(b[edge_type][name], hetero[edge_type][name][b[edge_type].e_id])
            assert edge_rows(b[edge_type], b[src].n_id, b[dst].n_id, names) == \
                edge_rows(a[edge_type], a[src].n_id, a[dst].n_id, names), edge_type


def test_link_batches_carry_edge_attributes(homo, homo_stores):
    loader = DistLinkNeighborLoader(homo_stores, num_neighbors=[3, 2],
                                    edge_label_index=homo.edge_index[:, :64],
                                    neg_sampling="binary", batch_size=32, seed=0)
    for batch in loader:
        assert torch.equal(batch.edge_attr, homo.edge_attr[batch.e_id])
        assert torch.equal(batch.edge_time, homo.edge_time[batch.e_id])


def test_the_store_answers_edge_attributes_and_pyg_loaders_still_work(homo, homo_stores):
    fs, gs = homo_stores
    ids = torch.randperm(homo.edge_index.size(1))[:100]
    listed = {(a.group_name, a.attr_name) for a in fs.get_all_edge_tensor_attrs()}
    assert listed == {((None, None), n) for n in HOMO_ATTRS}
    got = fs.get_tensor(group_name=(None, None), attr_name="edge_attr", index=ids)
    assert torch.equal(got, homo.edge_attr[ids])
    assert fs.get_tensor_size(group_name=(None, None), attr_name="edge_weight",
                              index=ids) == (100,)
    # PyG's own loader indexes every get_all_tensor_attrs() entry by node ids:
    # edge attributes are not listed there, so its batches stay right.
    batch = next(iter(NeighborLoader((fs, gs), num_neighbors=[2], input_nodes=torch.arange(40),
                                     batch_size=8)))
    assert torch.equal(batch.x, homo.x[batch.n_id])


def test_cached_batches_carry_the_same_edge_attributes(homo, homo_stores):
    fs, gs = homo_stores
    cached = pyg_dist.CachedFeatureStore(fs, 0.3, "degree", graph_store=gs)
    kwargs = dict(num_neighbors=[4, 3], input_nodes=torch.arange(96), batch_size=32, seed=5)
    for a, b in zip(DistNeighborLoader((fs, gs), **kwargs),
                    DistNeighborLoader((cached, gs), **kwargs)):
        assert torch.equal(a.e_id, b.e_id) and torch.equal(a.x, b.x)
        for name in HOMO_ATTRS:
            assert torch.equal(b[name], a[name]), name
