"""Cora for link prediction: the graph without its held-out links, and those links.

``train_link_cora_local.py`` and ``train_link_cora_dist.py`` share this
split, so that the served graph (partition ``train_graph``) has no held-out
link in it for message passing to leak:

    PYTHONPATH=examples pyg-dist partition cora_link_split:train_graph parts/ --num-parts 2

Cora's links are undirected (both directions stored); a held-out link loses
both directions. The split is fixed (seed 0) and needs only the parquet files
of Cora, not the partition.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_dist.datasets import cora

HELD_OUT = 0.1  # share of undirected links held out for the test


def split(seed: int = 0) -> tuple[Data, Tensor]:
    """Returns ``(train graph, held-out links [2, T] with source < destination)``.

    Args:
        seed: Seed of the split.
    """
    data = cora()
    row, col = data.edge_index
    undirected = (row < col).nonzero().view(-1)
    perm = undirected[torch.randperm(undirected.numel(),
                                     generator=torch.Generator().manual_seed(seed))]
    test = data.edge_index[:, perm[:int(HELD_OUT * perm.numel())]]
    n = data.num_nodes
    held = torch.cat([test[0] * n + test[1], test[1] * n + test[0]])
    keep = ~torch.isin(row * n + col, held)
    train = data.clone()
    train.edge_index = data.edge_index[:, keep]
    return train, test


def train_graph() -> Data:
    """The graph to partition and serve (no held-out link); ``module:callable`` for
    ``pyg-dist partition``."""
    return split()[0]


def held_out_links() -> Tensor:
    """The held-out test links, ``[2, T]`` global node ids."""
    return split()[1]


def auc(score: Tensor, label: Tensor) -> float:
    """Area under the ROC curve (Mann-Whitney U; ties count one half).

    Args:
        score: One score per link.
        label: 1 for a positive link, 0 for a negative one.
    """
    score, label = score.double().view(-1), label.view(-1) > 0
    ranks = torch.empty_like(score)
    order = score.argsort()
    ranks[order] = torch.arange(1, score.numel() + 1, dtype=torch.double)
    # Average the ranks of tied scores.
    uniq, inverse = score.unique(return_inverse=True)
    mean = torch.zeros(uniq.numel(), dtype=torch.double).index_add_(0, inverse, ranks)
    mean /= torch.bincount(inverse, minlength=uniq.numel()).double()
    ranks = mean[inverse]
    pos, neg = int(label.sum()), int((~label).sum())
    return float((ranks[label].sum() - pos * (pos + 1) / 2) / (pos * neg))
