"""LastFM (HetRec 2011) from the ``graphdatascience`` wheel, as a
:class:`~torch_geometric.data.HeteroData` of users, artists, listens and
friendships, for recommendation (user -> artist link prediction).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from pyg_dist.datasets.resources import node_positions, resource_dir

LASTFM_NUM_NODES = {"user": 1892, "artist": 18022}
LASTFM_NUM_LISTENS = 92834
LASTFM_RANDOM_FEATURES = 32  # width of the fixed random part of ``x``
LISTENS = ("user", "listens", "artist")
REV_LISTENS = ("artist", "rev_listens", "user")
FRIENDS = ("user", "friends", "user")


def lastfm_hetero(*, seed: int = 0) -> HeteroData:
    """LastFM (HetRec 2011) from the ``graphdatascience`` wheel, heterogeneous.

    Nodes: the 1,892 ``user`` nodes and all 18,022 ``artist`` nodes of the
    wheel's node files, each type in ascending original id (users 2-2100,
    artists 10,001-28,745). Only 17,632 artists have a listener; the other
    390 appear in tag events only and have no edge here.

    Edges: ``(user, listens, artist)``, the 92,834 listen pairs, with the
    play count as ``weight`` (float32, 1 to 352,698); ``(artist,
    rev_listens, user)``, the same pairs reversed with the same ``weight``
    (PyG's ``ToUndirected``); ``(user, friends, user)``, the 12,717
    friendships in both directions (25,434 edges; the wheel stores each
    once). The tag events are not edges here (see
    :func:`~pyg_dist.datasets.lastfm`).

    Features: every node has ``x`` = :func:`lastfm_features`, a few
    standardised structural columns (from the edges of the graph it is
    given, so a split that removes edges recomputes them and held-out
    links do not leak) followed by ``LASTFM_RANDOM_FEATURES`` fixed random
    ``N(0, 1)`` columns drawn from ``seed``, which give the GNN
    distinguishable inputs without a learnable embedding table (the
    partition servers serve ``x``; a trainer holds no per-node state).

    Args:
        seed: Seed of the random feature columns.

    Returns:
        A :class:`~torch_geometric.data.HeteroData`.
    """
    import pyarrow.parquet as pq

    root = resource_dir("lastfm", "user_listen_artist_rels.parquet.gzip")
    users = np.sort(pq.read_table(root / "user_nodes.parquet.gzip",
                                  columns=["nodeId"]).column("nodeId").to_numpy())
    artists = np.sort(pq.read_table(root / "artist_nodes.parquet.gzip",
                                    columns=["nodeId"]).column("nodeId").to_numpy())
    listens = pq.read_table(root / "user_listen_artist_rels.parquet.gzip",
                            columns=["sourceNodeId", "targetNodeId", "weight"])
    friends = pq.read_table(root / "user_friend_df_directed.parquet.gzip",
                            columns=["sourceNodeId", "targetNodeId"])
    data = HeteroData()
    data["user"].num_nodes, data["artist"].num_nodes = users.size, artists.size
    listen_index = np.stack([
        node_positions(users, listens.column("sourceNodeId").to_numpy(), "LastFM's listens"),
        node_positions(artists, listens.column("targetNodeId").to_numpy(), "LastFM's listens")])
    weight = torch.from_numpy(listens.column("weight").to_numpy().astype(np.float32))
    data[LISTENS].edge_index = torch.from_numpy(listen_index.astype(np.int64))
    data[LISTENS].weight = weight
    data[REV_LISTENS].edge_index = data[LISTENS].edge_index.flip(0)
    data[REV_LISTENS].weight = weight.clone()
    pairs = np.stack([node_positions(users, friends.column(c).to_numpy(), "LastFM's friendships")
                      for c in ("sourceNodeId", "targetNodeId")]).astype(np.int64)
    data[FRIENDS].edge_index = torch.from_numpy(np.concatenate([pairs, pairs[::-1]], axis=1))
    gen = torch.Generator().manual_seed(seed)
    # The random columns first; lastfm_features puts the structural ones before them.
    data["user"].x = torch.randn(users.size, LASTFM_RANDOM_FEATURES, generator=gen)
    data["artist"].x = torch.randn(artists.size, LASTFM_RANDOM_FEATURES, generator=gen)
    return lastfm_features(data)


def lastfm_features(data: HeteroData) -> HeteroData:
    """Sets ``x`` of every node from the graph's listens and friendships.

    ``user.x``: log1p of its number of artists, of its total plays and of
    its number of friends; ``artist.x``: log1p of its number of listeners
    and of its total plays; each column standardised (mean 0, std 1) over
    its type, then the node's fixed random columns (the last
    ``LASTFM_RANDOM_FEATURES`` columns of its current ``x``, kept). Called on the full graph by
    :func:`lastfm_hetero` and again by a split after it removes links.

    Args:
        data: A graph from :func:`lastfm_hetero`, possibly with fewer edges.
    """
    num_users, num_artists = data["user"].num_nodes, data["artist"].num_nodes
    (user, artist), weight = data[LISTENS].edge_index, data[LISTENS].weight.double()
    columns = {
        "user": [_count(user, num_users), _count(user, num_users, weight),
                 _count(data[FRIENDS].edge_index[0], num_users)],
        "artist": [_count(artist, num_artists), _count(artist, num_artists, weight)],
    }
    for node_type, cols in columns.items():
        structural = torch.stack([_standardise(c.log1p()) for c in cols], dim=1).float()
        random = data[node_type].x[:, -LASTFM_RANDOM_FEATURES:]
        data[node_type].x = torch.cat([structural, random], dim=1)
    return data


def _count(index: Tensor, size: int, weight: Tensor | None = None) -> Tensor:
    if weight is None:
        weight = torch.ones(index.numel(), dtype=torch.double)
    return torch.zeros(size, dtype=torch.double).index_add_(0, index, weight)


def _standardise(col: Tensor) -> Tensor:
    return (col - col.mean()) / col.std().clamp_min(1e-12)
