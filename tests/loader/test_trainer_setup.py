"""``init_trainer`` and ``DDPModel``: what a ported script starts with.

One real process group of world size 1 (gloo over a ``FileStore``) is
enough for ``DistributedDataParallel``; ``init_trainer`` without torchrun's
environment only connects.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch_geometric.nn.models import GraphSAGE

import pyg_dist
from pyg_dist.errors import PygDistError, StoreError


@pytest.fixture
def process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_model_keeps_the_models_methods_for_evaluation_only(process_group):
    model = pyg_dist.DDPModel(GraphSAGE(4, 8, num_layers=2))
    x, edge_index = torch.randn(5, 4), torch.tensor([[0, 1, 2], [1, 2, 3]])
    model(x, edge_index).sum().backward()  # training goes through DDP's forward
    with pytest.raises(PygDistError, match="model.inference_per_layer"):
        model.inference_per_layer  # noqa: B018 - gradients on, training mode
    with torch.no_grad():
        out = model.inference_per_layer(0, x, edge_index, 5)
    assert out.shape == (5, 8)
    model.eval()
    assert model.num_layers == 2 and model.inference_per_layer(0, x, edge_index, 5).shape \
        == (5, 8)
    with pytest.raises(AttributeError, match="no_such"):
        model.no_such  # noqa: B018


def test_init_trainer_without_torchrun_connects_and_reads_like_a_dataset(cora_data,
                                                                          cora_stores3,
                                                                          monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    endpoints = list(cora_stores3[0].router.endpoints)
    dataset = pyg_dist.init_trainer(endpoints)
    try:
        assert not dist.is_initialized()
        data = dataset[0].to("cpu", "x", "y")  # accepted: the graph stays served
        assert len(dataset) == 1 and data is dataset[0]
        assert (dataset.num_features, dataset.num_classes) == (1433, 7)
        split = dataset.get_idx_split()
        assert sorted(split) == ["test", "train", "val"]
        assert torch.equal(split["train"], cora_data.train_mask.nonzero().view(-1))
        with pytest.raises(IndexError):
            dataset[1]
    finally:
        dataset.close()


def test_get_idx_split_needs_masks(tmp_path):
    from support.servers import serve_parts

    from pyg_dist.datasets import fake

    graph = fake(100, seed=0)
    del graph.train_mask, graph.val_mask, graph.test_mask
    pyg_dist.partition(graph, 1, tmp_path / "p", "random")
    with serve_parts(str(tmp_path / "p")) as cluster:
        dataset = pyg_dist.init_trainer(cluster.endpoints)
        try:
            with pytest.raises(StoreError, match="pass splits= to pyg_dist.partition"):
                dataset.get_idx_split()
        finally:
            dataset.close()
