"""Graphs to partition: Cora, IMDB and LastFM from the ``graphdatascience`` wheel,
synthetic graphs from PyG's :class:`~torch_geometric.datasets.FakeDataset` and
:class:`~torch_geometric.datasets.FakeHeteroDataset` and a power-law graph, and
the ``module:callable`` resolver used by ``pyg-dist partition DATASET ROOT``
(``pyg_dist.datasets:cora``, ``pyg_dist.datasets:imdb``, ...).

One module a source: :mod:`~pyg_dist.datasets.cora`,
:mod:`~pyg_dist.datasets.imdb`, :mod:`~pyg_dist.datasets.lastfm` (temporal,
homogeneous), :mod:`~pyg_dist.datasets.lastfm_hetero` (users and artists),
:mod:`~pyg_dist.datasets.synthetic`; :mod:`~pyg_dist.datasets.resources`
finds the wheel's files and draws masks, :mod:`~pyg_dist.datasets.resolve`
turns strings into graphs.
"""

from __future__ import annotations

from pyg_dist.datasets.cora import CORA_NUM_CLASSES, CORA_NUM_FEATURES, CORA_NUM_NODES, cora
from pyg_dist.datasets.imdb import IMDB_NUM_CLASSES, IMDB_NUM_FEATURES, IMDB_NUM_NODES, imdb
from pyg_dist.datasets.lastfm import lastfm, lastfm_events
from pyg_dist.datasets.lastfm_hetero import (
    LASTFM_NUM_LISTENS,
    LASTFM_NUM_NODES,
    lastfm_features,
    lastfm_hetero,
)
from pyg_dist.datasets.resolve import load_dataset
from pyg_dist.datasets.resources import planetoid_masks
from pyg_dist.datasets.synthetic import fake, fake_hetero, power_law

__all__ = [
    "CORA_NUM_CLASSES", "CORA_NUM_FEATURES", "CORA_NUM_NODES", "IMDB_NUM_CLASSES",
    "IMDB_NUM_FEATURES", "IMDB_NUM_NODES", "LASTFM_NUM_LISTENS", "LASTFM_NUM_NODES", "cora",
    "fake", "fake_hetero", "imdb", "lastfm", "lastfm_events", "lastfm_features",
    "lastfm_hetero", "load_dataset", "planetoid_masks", "power_law",
]
