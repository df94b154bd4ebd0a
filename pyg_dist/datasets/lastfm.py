"""LastFM (HetRec 2011) from the ``graphdatascience`` wheel, as a temporal
graph of tag events.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_dist.datasets.resources import resource_dir
from pyg_dist.errors import DatasetResolveError


def lastfm(max_events: int = 0) -> Data:
    """LastFM (HetRec 2011) from the ``graphdatascience`` wheel, as a temporal graph.

    Nodes: the 1,892 users first (ascending original id), then the artists
    (ids from 10,000 on in the wheel). Edges: the 186,479 timestamped tag
    events (a user tagged an artist), **first every event user -> artist in
    time order, then the same events reversed** (artist -> user, same
    order), so that sampling reaches artists from users and users from
    artists. ``edge_time``: the event's timestamp in milliseconds (int64;
    a few are before 1970 in the raw data). ``edge_weight``: ``1 +
    log1p(listens)``, where ``listens`` is the user's play count of the
    artist (0 if the user never played it), so tags on artists a user plays
    weigh more. ``x``: ``[is_user, is_artist]``.

    Args:
        max_events: Keep only the earliest this many events (0: all), for
            small runs.

    Returns:
        A :class:`~torch_geometric.data.Data`; :func:`lastfm_events` gives
        its events back as ``(user, artist, time)``.
    """
    import pyarrow.parquet as pq

    root = resource_dir("lastfm", "user_tag_artist_rels.parquet.gzip")
    tags = pq.read_table(root / "user_tag_artist_rels.parquet.gzip",
                         columns=["sourceNodeId", "targetNodeId", "timestamp"])
    listens = pq.read_table(root / "user_listen_artist_rels.parquet.gzip",
                            columns=["sourceNodeId", "targetNodeId", "weight"])
    users = pq.read_table(root / "user_nodes.parquet.gzip", columns=["nodeId"])
    artists = pq.read_table(root / "artist_nodes.parquet.gzip", columns=["nodeId"])
    src = tags.column("sourceNodeId").to_numpy()
    dst = tags.column("targetNodeId").to_numpy()
    time = tags.column("timestamp").to_numpy()
    # Users hold ids below 10,000, artists from 10,000 on: sorted, users come first.
    ids = np.unique(np.concatenate([users.column("nodeId").to_numpy(), src,
                                    artists.column("nodeId").to_numpy(), dst]))
    num_users = int(np.searchsorted(ids, 10_000))
    order = np.argsort(time, kind="stable")
    if max_events:
        order = order[:max_events]
    src, dst, time = np.searchsorted(ids, src[order]), np.searchsorted(ids, dst[order]), \
        time[order]
    if src.size and (src.max() >= num_users or dst.min() < num_users):
        raise DatasetResolveError("LastFM's tag events do not run from users to artists; "
                                  "the graphdatascience wheel is damaged")
    # Play count of every (user, artist) pair of an event, by one sorted lookup.
    num = ids.size
    played = np.searchsorted(ids, listens.column("sourceNodeId").to_numpy()) * num + \
        np.searchsorted(ids, listens.column("targetNodeId").to_numpy())
    counts = listens.column("weight").to_numpy()
    by_pair = np.argsort(played)
    wanted = src * num + dst
    at = np.clip(np.searchsorted(played[by_pair], wanted), 0, max(played.size - 1, 0))
    hit = played[by_pair][at] == wanted
    plays = np.where(hit, counts[by_pair][at], 0)
    weight = torch.from_numpy(1.0 + np.log1p(plays.astype(np.float64))).float()
    edge_index = torch.from_numpy(np.stack([np.concatenate([src, dst]),
                                            np.concatenate([dst, src])]).astype(np.int64))
    is_user = torch.arange(num) < num_users
    x = torch.stack([is_user, ~is_user], dim=1).float()
    return Data(x=x, edge_index=edge_index,
                edge_time=torch.from_numpy(np.concatenate([time, time]).astype(np.int64)),
                edge_weight=torch.cat([weight, weight]), num_nodes=num)


def lastfm_events(data: Data) -> tuple[Tensor, Tensor, Tensor]:
    """The tag events of :func:`lastfm`'s graph: ``(user, artist, time)``,
    in time order (the first half of its edges).

    Args:
        data: A graph returned by :func:`lastfm`.
    """
    half = data.edge_index.size(1) // 2
    return data.edge_index[0, :half], data.edge_index[1, :half], data.edge_time[:half]
