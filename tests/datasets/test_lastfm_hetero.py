"""pyg_dist.datasets.lastfm_hetero: LastFM as users, artists, listens and
friendships, its features, and the examples' link split."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import HeteroData

from pyg_dist.datasets import (
    LASTFM_NUM_LISTENS,
    LASTFM_NUM_NODES,
    lastfm_features,
    lastfm_hetero,
    load_dataset,
)
from pyg_dist.datasets.lastfm_hetero import FRIENDS, LASTFM_RANDOM_FEATURES, LISTENS, REV_LISTENS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def data() -> HeteroData:
    return load_dataset("pyg_dist.datasets:lastfm_hetero")


def test_lastfm_hetero_has_the_hetrec_counts(data):
    assert isinstance(data, HeteroData)
    assert LASTFM_NUM_NODES == {"user": 1892, "artist": 18022} and LASTFM_NUM_LISTENS == 92834
    assert data["user"].num_nodes == 1892 and data["artist"].num_nodes == 18022
    assert set(data.edge_types) == {LISTENS, REV_LISTENS, FRIENDS}
    listens = data[LISTENS].edge_index
    assert listens.shape == (2, 92834)
    assert int(listens[0].max()) < 1892 and int(listens[1].max()) < 18022
    # 17,632 artists have a listener; 390 appear in tag events only.
    assert listens[1].unique().numel() == 17632 and listens[0].unique().numel() == 1892
    assert torch.equal(data[REV_LISTENS].edge_index, listens.flip(0))
    weight = data[LISTENS].weight
    assert weight.dtype == torch.float32 and float(weight.min()) == 1.0
    assert float(weight.max()) == 352698.0
    assert torch.equal(data[REV_LISTENS].weight, weight)
    # 12,717 friendships, both directions.
    friends = data[FRIENDS].edge_index
    assert friends.shape == (2, 2 * 12717)
    assert torch.equal(friends[:, 12717:], friends[:, :12717].flip(0))
    assert bool((friends[0] != friends[1]).all())


def test_lastfm_hetero_features_are_structural_then_fixed_random(data):
    assert data["user"].x.shape == (1892, 3 + LASTFM_RANDOM_FEATURES)
    assert data["artist"].x.shape == (18022, 2 + LASTFM_RANDOM_FEATURES)
    for node_type, width in (("user", 3), ("artist", 2)):
        structural = data[node_type].x[:, :width].double()
        assert torch.allclose(structural.mean(0), torch.zeros(width, dtype=torch.double),
                              atol=1e-5)
        assert torch.allclose(structural.std(0), torch.ones(width, dtype=torch.double),
                              atol=1e-4)
    again = lastfm_hetero()
    assert torch.equal(again["user"].x, data["user"].x)
    assert not torch.equal(lastfm_hetero(seed=1)["artist"].x[:, 2:], data["artist"].x[:, 2:])
    # Recomputing keeps the random columns and follows the edges given.
    fewer = again
    fewer[LISTENS].edge_index = fewer[LISTENS].edge_index[:, :1000]
    fewer[LISTENS].weight = fewer[LISTENS].weight[:1000]
    lastfm_features(fewer)
    assert torch.equal(fewer["artist"].x[:, 2:], data["artist"].x[:, 2:])
    assert not torch.equal(fewer["artist"].x[:, :2], data["artist"].x[:, :2])


def test_the_examples_split_holds_out_listens_and_their_reverses():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from lastfm_link_split import held_out_links, recall_at_k, split
    finally:
        sys.path.remove(str(EXAMPLES))
    train, test = split()
    assert test.size(1) == 9283 and train[LISTENS].edge_index.size(1) == 92834 - 9283
    n = 18022
    kept = train[LISTENS].edge_index[0] * n + train[LISTENS].edge_index[1]
    assert not bool(torch.isin(test[0] * n + test[1], kept).any())
    assert torch.equal(train[REV_LISTENS].edge_index, train[LISTENS].edge_index.flip(0))
    assert torch.equal(held_out_links(), test)
    # An oracle that scores exactly the held-out listens high has recall 1
    # wherever a user has at most 20 held out.
    user = torch.zeros(1892, n)
    user[test[0], test[1]] = 1.0
    assert recall_at_k(user, torch.eye(n), k=20) > 0.99
    assert recall_at_k(torch.zeros(1892, 4), torch.zeros(n, 4), k=20) < 0.05
