"""Offline stand-ins for the datasets of PyG's reddit.py and ogbn_products_sage.py.

``reddit_local.py`` and ``products_local.py`` are written as PyG writes those
scripts; Reddit (232k nodes) and ogbn-products (2.4M) are downloads, so
these stand-ins give the same interface over a small synthetic graph (PyG's
``FakeDataset``: random edges; features noise plus a one-hot of the label):

- :class:`Reddit`: ``dataset[0]`` with ``x``, ``y`` and
  ``train_mask``/``val_mask``/``test_mask``; ``num_features``,
  ``num_classes``;
- :class:`PygNodePropPredDataset` and :class:`Evaluator`: OGB's
  ``get_idx_split()`` index tensors, ``y`` of shape ``[N, 1]``, and the
  accuracy evaluator.

The distributed twins serve the same graphs:

    PYTHONPATH=examples pyg-dist partition offline_datasets:reddit_graph parts/ --num-parts 2
    PYTHONPATH=examples python -m offline_datasets products parts/ --num-parts 2

the second through ``pyg_dist.partition(data, ..., splits=dataset.get_idx_split(),
transform=T.ToUndirected())``, as a script with OGB's splits would.
"""

from __future__ import annotations

import argparse

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_dist.datasets import fake

NUM_NODES = 1200
NUM_CHANNELS = 32
NUM_CLASSES = 4


def _graph(seed: int) -> Data:
    """A FakeDataset graph whose features carry the label clearly (a one-hot
    of ``y``, times 6, in the first channels, plus noise), so that a few
    epochs reach a stable accuracy and two runs can be compared closely."""
    graph = fake(NUM_NODES, avg_degree=8, num_channels=NUM_CHANNELS, num_classes=NUM_CLASSES,
                 seed=seed)
    noise = torch.randn(graph.num_nodes, NUM_CHANNELS,
                        generator=torch.Generator().manual_seed(seed))
    noise[:, :NUM_CLASSES] += 6 * torch.nn.functional.one_hot(graph.y, NUM_CLASSES)
    graph.x = noise
    return graph


def reddit_graph() -> Data:
    """The graph of :class:`Reddit` (what ``pyg-dist partition`` serves)."""
    return _graph(seed=1)


class Reddit:
    """Stand-in for ``torch_geometric.datasets.Reddit(root)``."""

    def __init__(self, root: object = None) -> None:
        self._data = reddit_graph()
        self.num_features = NUM_CHANNELS
        self.num_classes = NUM_CLASSES

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> Data:
        return self._data


class PygNodePropPredDataset(Reddit):
    """Stand-in for ``ogb.nodeproppred.PygNodePropPredDataset(name, root)``:
    another graph of the same kind without masks, ``y`` as ``[N, 1]``, and
    the splits as index tensors."""

    def __init__(self, name: str = "ogbn-products", root: object = None) -> None:
        super().__init__(root)
        graph = _graph(seed=2)
        self._split = {"train": graph.train_mask.nonzero().view(-1),
                       "valid": graph.val_mask.nonzero().view(-1),
                       "test": graph.test_mask.nonzero().view(-1)}
        self._data = Data(x=graph.x, y=graph.y.view(-1, 1), edge_index=graph.edge_index)

    def get_idx_split(self) -> dict[str, Tensor]:
        return self._split


class Evaluator:
    """Stand-in for ``ogb.nodeproppred.Evaluator(name)``: accuracy."""

    def __init__(self, name: str) -> None:
        self.name = name

    def eval(self, input_dict: dict[str, Tensor]) -> dict[str, float]:
        y_true, y_pred = input_dict["y_true"], input_dict["y_pred"]
        return {"acc": float((y_true.view(-1) == y_pred.view(-1)).float().mean())}


def partition_products(root: str, num_parts: int) -> None:
    """Partitions the products stand-in as a script with OGB's splits would."""
    import torch_geometric.transforms as T

    import pyg_dist

    dataset = PygNodePropPredDataset("ogbn-products")
    # ToUndirected: already undirected here (as ogbn-products), so a no-op
    # that shows where a script's own transform goes.
    pyg_dist.partition(dataset[0], num_parts, root, splits=dataset.get_idx_split(),
                       transform=T.ToUndirected())


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="partition a stand-in graph with its splits")
    p.add_argument("graph", choices=["products"])
    p.add_argument("root")
    p.add_argument("--num-parts", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    partition_products(args.root, args.num_parts)
