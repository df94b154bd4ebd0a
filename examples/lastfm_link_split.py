"""LastFM for recommendation: the graph without its held-out listens, those
listens, and the metrics.

``train_link_lastfm_local.py`` and ``train_link_lastfm_dist.py`` share this
split, so that the served graph (partition ``train_graph``) has no held-out
listen in it for message passing to leak:

    PYTHONPATH=examples pyg-dist partition lastfm_link_split:train_graph parts/ --num-parts 2

10% of the ``(user, listens, artist)`` pairs are held out (seed 0); each
loses its ``rev_listens`` twin too, and the structural node features are
recomputed without them (:func:`pyg_dist.datasets.lastfm_features`). The
split needs only the wheel's parquet files, not the partition.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from pyg_dist.datasets import lastfm_features, lastfm_hetero

HELD_OUT = 0.1  # share of listens held out for the test
LISTENS = ("user", "listens", "artist")
REV_LISTENS = ("artist", "rev_listens", "user")


@lru_cache(maxsize=1)
def split(seed: int = 0) -> tuple[HeteroData, Tensor]:
    """Returns ``(train graph, held-out listens [2, T] as (user, artist))``.

    Args:
        seed: Seed of the split.
    """
    data = lastfm_hetero()
    index, weight = data[LISTENS].edge_index, data[LISTENS].weight
    perm = torch.randperm(index.size(1), generator=torch.Generator().manual_seed(seed))
    num_test = int(HELD_OUT * index.size(1))
    test, keep = perm[:num_test], perm[num_test:].sort().values
    data[LISTENS].edge_index, data[LISTENS].weight = index[:, keep], weight[keep]
    data[REV_LISTENS].edge_index = index[:, keep].flip(0)
    data[REV_LISTENS].weight = weight[keep].clone()
    return lastfm_features(data), index[:, test]


def train_graph() -> HeteroData:
    """The graph to partition and serve (no held-out listen); ``module:callable``
    for ``pyg-dist partition``."""
    return split()[0]


def held_out_links() -> Tensor:
    """The held-out listens, ``[2, T]``: user ids, artist ids."""
    return split()[1]


def recall_at_k(user: Tensor, artist: Tensor, k: int = 20) -> float:
    """Mean over the users with held-out listens of the share of them in the
    user's top ``k`` artists by dot product, artists it listens to in the
    training graph excluded.

    Args:
        user: Embeddings of every user, ``[num_users, d]``.
        artist: Embeddings of every artist, ``[num_artists, d]``.
        k: How many artists each user is recommended.
    """
    train, test = split()[0][LISTENS].edge_index, held_out_links()
    scores = user @ artist.t()
    scores[train[0], train[1]] = float("-inf")
    top = scores.topk(k, dim=1).indices
    hit = torch.zeros_like(scores, dtype=torch.bool)
    hit.scatter_(1, top, True)
    found = torch.zeros(user.size(0)).index_add_(0, test[0], hit[test[0], test[1]].float())
    wanted = torch.bincount(test[0], minlength=user.size(0)).float()
    users = wanted > 0
    return float((found[users] / wanted[users]).mean())
