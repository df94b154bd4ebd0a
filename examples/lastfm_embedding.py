"""Artist recommendation on LastFM from learned embeddings alone: the part
``train_emb_lastfm_local.py`` and ``train_emb_lastfm_dist.py`` share.

The model is one embedding per user and per artist (no input features, no
message passing) scored by their dot product, trained on the listens of the
training graph (``lastfm_link_split.py``) with one random artist per
positive as its negative, and scored on the held-out listens: AUC against
one random artist per held-out listen, as the GraphSAGE examples do.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from cora_link_split import auc
from lastfm_link_split import LISTENS, held_out_links, split
from torch import Tensor

NUM_USERS, NUM_ARTISTS = 1892, 18022


def initial_rows(num_nodes: int, dim: int, seed: int) -> Tensor:
    """The first rows of a table: N(0, 0.1^2), from ``seed`` (both scripts
    start from the same)."""
    return torch.randn(num_nodes, dim, generator=torch.Generator().manual_seed(seed)) * 0.1


def train_links() -> Tensor:
    """The listens of the training graph, ``[2, E]`` (user, artist)."""
    return split()[0][LISTENS].edge_index


def batches(epoch: int, batch_size: int, seed: int, rank: int = 0,
            world_size: int = 1) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """Per step, this rank's share of the global batch: ``(users, artists,
    labels)``, positives then one random artist per positive. Every rank
    draws the same global batches and takes every ``world_size``-th link, so
    a step covers the same links however many ranks share it."""
    links = train_links()
    gen = torch.Generator().manual_seed(seed * 1000 + epoch)
    perm = torch.randperm(links.size(1), generator=gen)
    fakes = torch.randint(NUM_ARTISTS, (links.size(1),), generator=gen)
    for start in range(0, perm.numel() - batch_size + 1, batch_size):  # full batches only
        step = perm[start:start + batch_size][rank::world_size]
        users, artists = links[0, step], links[1, step]
        yield (torch.cat([users, users]), torch.cat([artists, fakes[step]]),
               torch.cat([torch.ones(step.numel()), torch.zeros(step.numel())]))


def loss_of(user_rows: Tensor, artist_rows: Tensor, labels: Tensor) -> Tensor:
    """Binary cross-entropy of the dot products."""
    return F.binary_cross_entropy_with_logits((user_rows * artist_rows).sum(-1), labels)


def test_auc(user: Tensor, artist: Tensor, seed: int) -> float:
    """AUC of the held-out listens against as many (user, random artist) pairs."""
    test = held_out_links()
    fake = torch.randint(artist.size(0), (test.size(1),),
                         generator=torch.Generator().manual_seed(seed))
    pos = (user[test[0]] * artist[test[1]]).sum(dim=-1)
    neg = (user[test[0]] * artist[fake]).sum(dim=-1)
    return auc(torch.cat([pos, neg]), torch.cat([torch.ones_like(pos), torch.zeros_like(neg)]))
