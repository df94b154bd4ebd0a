"""Movie genres on IMDB where directors and actors have no features, only
learned embeddings: the part ``train_emb_imdb_local.py`` and
``train_emb_imdb_dist.py`` share.

The graph is ``pyg_dist.datasets:imdb`` with the directors' and actors'
plot-keyword features removed (``graph``): movies keep theirs, the other two
types get one learned row per node (``nn.Embedding`` in the reference,
``pyg_dist.DistEmbedding`` on the partition servers), read for a batch's
sampled directors and actors as their ``x``. The model is
``to_hetero(GraphSAGE)``, trained on the movies' genres.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.nn import to_hetero
from torch_geometric.nn.models import GraphSAGE

from pyg_dist.datasets import imdb

LEARNED = ("director", "actor")
"""The node types whose rows are learned instead of read."""


def graph() -> HeteroData:
    """IMDB without the directors' and actors' features (partition this)."""
    data = imdb()  # the split of the labelled movies is fixed (seed 0)
    for node_type in LEARNED:
        num_nodes = data[node_type].num_nodes
        del data[node_type].x
        data[node_type].num_nodes = num_nodes
    return data


def initial_rows(num_nodes: int, dim: int, seed: int) -> Tensor:
    """The first rows of a table: N(0, 0.1^2), from ``seed`` (both scripts
    start from the same)."""
    return torch.randn(num_nodes, dim, generator=torch.Generator().manual_seed(seed)) * 0.1


def build_model(metadata, hidden: int, num_layers: int) -> torch.nn.Module:
    """``to_hetero(GraphSAGE)`` with lazy input sizes (1,256 keyword
    features for movies, ``dim`` learned values for the others)."""
    sage = GraphSAGE(-1, hidden, num_layers=num_layers, out_channels=3, dropout=0.5)
    return to_hetero(sage, metadata, aggr="sum")


def movie_loss(model: torch.nn.Module, batch: HeteroData) -> Tensor:
    """Cross-entropy on the batch's seed movies."""
    size = batch["movie"].batch_size
    out = model(batch.x_dict, batch.edge_index_dict)["movie"][:size]
    return torch.nn.functional.cross_entropy(out, batch["movie"].y[:size])


@torch.no_grad()
def correct_predictions(model: torch.nn.Module, batches) -> tuple[float, float]:
    """Correct genre predictions and seed movies seen over ``batches``."""
    model.eval()
    correct = seen = 0.0
    for batch in batches:
        size = batch["movie"].batch_size
        pred = model(batch.x_dict, batch.edge_index_dict)["movie"][:size].argmax(dim=-1)
        correct += float((pred == batch["movie"].y[:size]).sum())
        seen += size
    return correct, seen
