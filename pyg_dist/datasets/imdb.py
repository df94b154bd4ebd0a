"""IMDB (movies, directors, actors; genre labels) from the
``graphdatascience`` wheel, as a :class:`~torch_geometric.data.HeteroData`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import HeteroData

from pyg_dist.datasets.resources import node_positions, resource_dir, split_labelled
from pyg_dist.errors import DatasetResolveError

IMDB_NUM_NODES = {"movie": 4661, "director": 2270, "actor": 5841}
IMDB_NUM_FEATURES = 1256
IMDB_NUM_CLASSES = 3
_IMDB_FILES = {
    "movie": ("imdb_movies_with_genre.parquet.gzip", "imdb_movies_without_genre.parquet.gzip"),
    "director": ("imdb_directors.parquet.gzip",),
    "actor": ("imdb_actors.parquet.gzip",),
}
_IMDB_EDGES = {
    ("director", "directed_in", "movie"): "imdb_directed_in.parquet.gzip",
    ("actor", "acted_in", "movie"): "imdb_acted_in.parquet.gzip",
}


def imdb(*, seed: int = 0, train: float = 0.6, val: float = 0.2) -> HeteroData:
    """Loads IMDB (movies, directors and actors; GTN's version) from the
    parquet files in the ``graphdatascience`` wheel.

    4,661 movies, 2,939 of them with one of 3 genres (``y``, ``-1`` for the
    others), 2,270 directors and 5,841 actors, every node with 1,256
    plot-keyword features ``x``; 4,661 ``(director, directed_in, movie)`` and
    13,983 ``(actor, acted_in, movie)`` edges, and their reverses
    ``rev_directed_in`` / ``rev_acted_in`` (PyG's ``ToUndirected``). Node ids
    follow the files' ``nodeId`` order within each type.

    Args:
        seed: Seed of the split of the labelled movies.
        train: Fraction of the labelled movies in ``train_mask``.
        val: Fraction in ``val_mask``; the rest are in ``test_mask``.

    Returns:
        A :class:`~torch_geometric.data.HeteroData`.
    """
    import pyarrow.parquet as pq
    from torch_geometric.transforms import ToUndirected

    root = resource_dir("imdb", _IMDB_FILES["movie"][0])
    data = HeteroData()
    node_ids: dict[str, np.ndarray] = {}
    for node_type, files in _IMDB_FILES.items():
        tables = [pq.read_table(root / f) for f in files]
        ids = np.concatenate([t.column("nodeId").to_numpy() for t in tables])
        flat = np.concatenate([t.column("plot_keywords").combine_chunks().flatten().to_numpy()
                               for t in tables])
        if flat.size != ids.size * IMDB_NUM_FEATURES:
            raise DatasetResolveError(f"IMDB's {node_type} features are not "
                                      f"{IMDB_NUM_FEATURES} per node; the wheel is damaged")
        order = np.argsort(ids, kind="stable")
        node_ids[node_type] = ids[order]
        x = flat.reshape(ids.size, IMDB_NUM_FEATURES)[order]
        data[node_type].x = torch.from_numpy(x.astype(np.float32))
        if node_type == "movie":
            y = np.full(ids.size, -1, dtype=np.int64)
            y[: tables[0].num_rows] = tables[0].column("genre").to_numpy()
            data[node_type].y = torch.from_numpy(y[order])
    for (src, rel, dst), name in _IMDB_EDGES.items():
        table = pq.read_table(root / name, columns=["sourceNodeId", "targetNodeId"])
        rows = [node_positions(node_ids[t], table.column(c).to_numpy(), f"IMDB's {name}")
                for t, c in ((src, "sourceNodeId"), (dst, "targetNodeId"))]
        data[src, rel, dst].edge_index = torch.from_numpy(np.stack(rows).astype(np.int64))
    split_labelled(data["movie"], seed, train, val)
    return ToUndirected()(data)
