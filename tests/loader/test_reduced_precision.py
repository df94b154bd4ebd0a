"""Node features stored and served in bfloat16 / float16
(``partition(..., feature_dtype=...)``, ``pyg-dist partition
--feature-dtype``): batches carry the rounded rows bit for bit, everything
else keeps its dtype, and a model that casts on use trains to the accuracy
of full precision. Real servers on loopback."""

from __future__ import annotations

import pytest
import torch
from support.servers import serve_parts
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn.models import GraphSAGE

from pyg_dist.datasets import fake
from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.loader.dist_neighbor_loader import DistNeighborLoader
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.connect import connect


@pytest.fixture(scope="module")
def graph():
    return fake(num_nodes=3000, avg_degree=6, num_channels=32, num_classes=5, seed=4)


@pytest.fixture(scope="module", params=["bfloat16", "float16"])
def served(request, graph, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param) / "fake2"
    partition(graph, 2, str(root), partitioner="random", feature_dtype=request.param)
    with serve_parts(root) as cluster:
        fs, gs = connect(cluster.endpoints)
        try:
            yield getattr(torch, request.param), (fs, gs)
        finally:
            fs.close()


def test_batches_carry_the_rounded_rows_and_the_rest_unchanged(graph, served):
    dtype, stores = served
    assert graph.x.dtype == torch.float32  # the caller's graph is not modified
    loader = DistNeighborLoader(stores, num_neighbors=[5, 5], input_nodes=torch.arange(600),
                                batch_size=200, seed=0)
    for batch in loader:
        assert batch.x.dtype == dtype
        assert torch.equal(batch.x, graph.x.to(dtype)[batch.n_id])
        assert batch.y.dtype == graph.y.dtype and torch.equal(batch.y, graph.y[batch.n_id])
        assert batch.train_mask.dtype == torch.bool


def _train_and_test(loader_of, graph, epochs: int = 4) -> float:
    torch.manual_seed(0)
    model = GraphSAGE(graph.num_features, 32, num_layers=2, out_channels=5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        for batch in loader_of(graph.train_mask.nonzero().view(-1), True):
            optimizer.zero_grad()
            out = model(batch.x.float(), batch.edge_index)[:batch.batch_size]
            torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    correct = total = 0
    with torch.no_grad():
        for batch in loader_of(graph.test_mask.nonzero().view(-1), False):
            pred = model(batch.x.float(), batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    return correct / total


def test_accuracy_matches_full_precision_local_training(graph, served):
    _, stores = served
    local = _train_and_test(lambda ids, shuffle: NeighborLoader(
        graph, num_neighbors=[10, 5], input_nodes=ids, batch_size=128, shuffle=shuffle),
        graph)
    dist = _train_and_test(lambda ids, shuffle: DistNeighborLoader(
        stores, num_neighbors=[10, 5], input_nodes=ids, batch_size=128, shuffle=shuffle,
        seed=1), graph)
    assert local > 0.5  # the task is learnable at all
    assert abs(local - dist) <= 0.05, (local, dist)


def test_other_dtypes_are_refused(graph, tmp_path):
    with pytest.raises(InvalidPartitionArgumentError, match="feature_dtype must be one of"):
        partition(graph, 2, str(tmp_path / "x"), partitioner="random", feature_dtype="int8")
    assert not (tmp_path / "x").exists()
