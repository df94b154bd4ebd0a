"""``pyg_dist.partition(data, ..., splits=..., transform=...)``: a script's index
splits (OGB's ``get_idx_split()``) stored as masks, its transform applied."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data

import pyg_dist
from pyg_dist.datasets import fake, fake_hetero
from pyg_dist.errors import InvalidPartitionArgumentError


def _served(reader, name: str, node_type=None) -> torch.Tensor:
    """The whole attribute ``name`` put back together from every part."""
    n = reader.num_nodes_of(node_type)
    out = None
    for part in range(reader.num_parts):
        nodes = reader.load_nodes(node_type, part)
        value = nodes.features[name]
        out = value.new_zeros((n, *value.shape[1:])) if out is None else out
        out[nodes.node_ids] = value
    return out


def test_index_splits_become_masks_and_the_callers_graph_is_untouched(tmp_path):
    data = Data(x=torch.randn(50, 4), y=torch.arange(50) % 3,
                edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]))
    splits = {"train": torch.arange(0, 30), "valid": [30, 31, 32],
              "test": torch.arange(50) >= 40}
    reader = pyg_dist.partition(data, 2, tmp_path / "p", "random", splits=splits,
                                transform=T.ToUndirected())
    assert torch.equal(_served(reader, "train_mask"), torch.arange(50) < 30)
    assert _served(reader, "valid_mask").nonzero().view(-1).tolist() == [30, 31, 32]
    assert torch.equal(_served(reader, "test_mask"), torch.arange(50) >= 40)
    assert reader.num_edges == 8  # the transform's: both directions of 4 edges
    assert "train_mask" not in data and data.num_edges == 4


def test_heterogeneous_splits_in_ogbs_layout(tmp_path):
    data = fake_hetero(num_nodes=60, avg_degree=2.0, num_channels=4, seed=1)
    node_type = data.node_types[1]
    reader = pyg_dist.partition(data, 2, tmp_path / "p", "random",
                                splits={"train": {node_type: [0, 5]}})
    assert _served(reader, "train_mask", node_type).nonzero().view(-1).tolist() == [0, 5]


@pytest.mark.parametrize("splits, message", [
    ({"extra": [0, 10_000]}, r"split 'extra': node ids must lie in \[0, "),
    ({"extra": torch.tensor([0.5])}, "must be integers"),
    ({"extra": torch.ones(3, dtype=torch.bool)}, "one entry per node"),
    ({"extra-set": [0]}, "cannot name an attribute"),
    ({"val": [0]}, "already has val_mask"),
    ({"extra": {"paper": [0]}}, "takes ids or a mask"),
])
def test_bad_splits_are_refused_naming_the_split(tmp_path, splits, message):
    with pytest.raises(InvalidPartitionArgumentError, match=message):
        pyg_dist.partition(fake(200, seed=0), 2, tmp_path / "p", "random", splits=splits)
    assert not (tmp_path / "p").exists()
