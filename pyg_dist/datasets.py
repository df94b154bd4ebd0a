"""Graphs to partition: Cora, IMDB and LastFM from the ``graphdatascience`` wheel,
synthetic graphs from PyG's :class:`~torch_geometric.datasets.FakeDataset` and
:class:`~torch_geometric.datasets.FakeHeteroDataset`, and the
``module:callable`` resolver used by ``pyg-dist partition DATASET ROOT``.

Cora, IMDB and LastFM ship inside the ``graphdatascience`` wheel as parquet files. We
locate them with :func:`importlib.util.find_spec` and read them with pyarrow,
without importing ``graphdatascience`` itself (its import pulls in a Neo4j
driver, pandas and more that a trainer does not need).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.errors import DatasetResolveError

logger = logging.getLogger(__name__)

CORA_NUM_NODES = 2708
CORA_NUM_FEATURES = 1433
CORA_NUM_CLASSES = 7


def _cora_dir() -> Path:
    return _resource_dir("cora", "cora_nodes.parquet.gzip")


def _resource_dir(name: str, probe: str) -> Path:
    """``graphdatascience/resources/<name>``, checked to hold ``probe``."""
    spec = importlib.util.find_spec("graphdatascience")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetResolveError(
            f"{name} is read from the 'graphdatascience' wheel, which is not "
            f"installed: pip install 'pyg-dist[datasets]' (or graphdatascience)")
    for location in spec.submodule_search_locations:
        path = Path(location) / "resources" / name
        if (path / probe).is_file():
            return path
    raise DatasetResolveError(
        f"the installed graphdatascience wheel has no resources/{name}/ parquet "
        f"files; reinstall graphdatascience>=1.10")


def planetoid_masks(data: Data, *, num_train_per_class: int = 20, num_val: int = 500,
                    num_test: int = 1000, seed: int = 0) -> Data:
    """Adds deterministic Planetoid-style ``train_mask``/``val_mask``/``test_mask``.

    Reuses PyG's :class:`~torch_geometric.transforms.RandomNodeSplit` inside a
    forked RNG, so the masks depend on ``seed`` only and the caller's global
    torch RNG state is untouched.

    Args:
        data: A graph with integer labels ``y``.
        num_train_per_class: Training nodes drawn per class.
        num_val: Validation nodes drawn from the rest.
        num_test: Test nodes drawn from the rest after validation.
        seed: Seed of the split.
    """
    from torch_geometric.transforms import RandomNodeSplit

    split = RandomNodeSplit(split="random", num_train_per_class=num_train_per_class,
                            num_val=num_val, num_test=num_test)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return split(data)


def cora(*, seed: int = 0) -> Data:
    """Loads Cora (2,708 papers, 10,556 directed citation edges, 1,433 binary
    features, 7 classes) from the parquet files in the ``graphdatascience`` wheel.

    Node ``i`` is the ``i``-th row of ``cora_nodes.parquet.gzip``; the original
    paper ids of the relationship file are mapped to these positions. Edges are
    made undirected (both directions, coalesced) as in PyG's ``Planetoid``.

    Args:
        seed: Seed of the Planetoid-style masks (20 train nodes per class,
            500 validation, 1,000 test).

    Returns:
        A :class:`~torch_geometric.data.Data` with ``x`` (float32), ``y``
        (int64), ``edge_index`` and boolean ``train_mask``/``val_mask``/``test_mask``.
    """
    import pyarrow.parquet as pq
    from torch_geometric.utils import to_undirected

    root = _cora_dir()
    nodes = pq.read_table(root / "cora_nodes.parquet.gzip",
                          columns=["nodeId", "subject", "features"])
    rels = pq.read_table(root / "cora_rels.parquet.gzip",
                         columns=["sourceNodeId", "targetNodeId"])
    paper_ids = nodes.column("nodeId").to_numpy()
    num_nodes = len(paper_ids)
    flat = nodes.column("features").combine_chunks().flatten().to_numpy()
    if flat.size % num_nodes != 0:
        raise DatasetResolveError("Cora's feature lists have unequal lengths; "
                                  "the graphdatascience wheel is damaged")
    x = torch.from_numpy(flat.reshape(num_nodes, -1).astype(np.float32))
    y = torch.from_numpy(nodes.column("subject").to_numpy().astype(np.int64))

    # Map original paper ids to node-file positions with one sorted lookup.
    order = np.argsort(paper_ids, kind="stable")
    src = rels.column("sourceNodeId").to_numpy()
    dst = rels.column("targetNodeId").to_numpy()
    pos_src = order[np.searchsorted(paper_ids, src, sorter=order)]
    pos_dst = order[np.searchsorted(paper_ids, dst, sorter=order)]
    if not (np.array_equal(paper_ids[pos_src], src)
            and np.array_equal(paper_ids[pos_dst], dst)):
        raise DatasetResolveError("Cora's relationship file names papers that are "
                                  "not in its node file; the wheel is damaged")
    edge_index = torch.from_numpy(np.stack([pos_src, pos_dst]).astype(np.int64))
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    data = Data(x=x, y=y, edge_index=edge_index)
    return planetoid_masks(data, seed=seed)


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

    root = _resource_dir("imdb", _IMDB_FILES["movie"][0])
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
        rows = [_positions(node_ids[t], table.column(c).to_numpy(), name)
                for t, c in ((src, "sourceNodeId"), (dst, "targetNodeId"))]
        data[src, rel, dst].edge_index = torch.from_numpy(np.stack(rows).astype(np.int64))
    _split_labelled(data["movie"], seed, train, val)
    return ToUndirected()(data)


def _positions(sorted_ids: np.ndarray, ids: np.ndarray, name: str) -> np.ndarray:
    pos = np.searchsorted(sorted_ids, ids).clip(max=max(sorted_ids.size - 1, 0))
    if not np.array_equal(sorted_ids[pos], ids):
        raise DatasetResolveError(f"IMDB's {name} names nodes that are not in its node "
                                  f"files; the graphdatascience wheel is damaged")
    return pos


def _split_labelled(store: Any, seed: int, train: float, val: float) -> None:
    """Random train / val / test masks over the nodes with a label (``y >= 0``)."""
    labelled = (store.y >= 0).nonzero().view(-1)
    gen = torch.Generator().manual_seed(seed)
    perm = labelled[torch.randperm(labelled.numel(), generator=gen)]
    n_train, n_val = int(train * perm.numel()), int(val * perm.numel())
    for name, ids in (("train_mask", perm[:n_train]),
                      ("val_mask", perm[n_train:n_train + n_val]),
                      ("test_mask", perm[n_train + n_val:])):
        mask = torch.zeros(store.y.numel(), dtype=torch.bool)
        mask[ids] = True
        store[name] = mask
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

    root = _resource_dir("lastfm", "user_tag_artist_rels.parquet.gzip")
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


def fake(num_nodes: int = 1000, avg_degree: float = 10.0, num_channels: int = 16,
         num_classes: int = 5, *, is_undirected: bool = True, edge_dim: int = 0,
         seed: int = 0) -> Data:
    """A synthetic graph from PyG's :class:`~torch_geometric.datasets.FakeDataset`,
    with Planetoid-style masks.

    FakeDataset draws its node count uniformly in ``[3n/4, 5n/4]`` and its
    edges at random; everything runs in a forked RNG seeded with ``seed``, so
    the same arguments give the same graph.

    Args:
        num_nodes: Average number of nodes.
        avg_degree: Average number of edges drawn per node (before making the
            graph undirected, which about doubles it).
        num_channels: Feature dimension of ``x``.
        num_classes: Number of label classes of ``y``.
        is_undirected: Store both directions of every edge.
        edge_dim: Edge feature dimension (0: none, 1: ``edge_weight``,
            more: ``edge_attr``).
        seed: Seed of the graph and the masks.
    """
    import random

    from torch_geometric.datasets import FakeDataset

    state = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            data = FakeDataset(num_graphs=1, avg_num_nodes=num_nodes, avg_degree=avg_degree,
                               num_channels=num_channels, edge_dim=edge_dim,
                               num_classes=num_classes, is_undirected=is_undirected)[0]
    finally:
        random.setstate(state)
    n = data.num_nodes
    return planetoid_masks(data, num_train_per_class=max(1, n // (10 * num_classes)),
                           num_val=n // 10, num_test=n // 5, seed=seed)


def fake_hetero(num_nodes: int = 1000, avg_degree: float = 10.0, num_channels: int = 16,
                num_classes: int = 5, *, num_node_types: int = 3, num_edge_types: int = 6,
                seed: int = 0) -> HeteroData:
    """A synthetic heterogeneous graph from PyG's
    :class:`~torch_geometric.datasets.FakeHeteroDataset`, with Planetoid-style
    masks on the labelled node type ``v0``.

    Node types are ``v0, v1, ...``, edge types ``(vI, eK, vJ)``; every node
    type has features ``x`` (of a width drawn around ``num_channels``) and
    ``v0`` labels ``y``. Everything runs in a forked RNG seeded with ``seed``.

    Args:
        num_nodes: Average number of nodes per node type.
        avg_degree: Average number of edges per source node and edge type.
        num_channels: Average feature width.
        num_classes: Number of label classes of ``v0``.
        num_node_types: Number of node types.
        num_edge_types: Number of edge types.
        seed: Seed of the graph and the masks.
    """
    import random

    from torch_geometric.datasets import FakeHeteroDataset

    state = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            data = FakeHeteroDataset(
                num_graphs=1, num_node_types=num_node_types, num_edge_types=num_edge_types,
                avg_num_nodes=num_nodes, avg_num_channels=num_channels,
                avg_degree=avg_degree, num_classes=num_classes, task="node")[0]
    finally:
        random.setstate(state)
    labelled = data["v0"]
    n = labelled.num_nodes
    masks = planetoid_masks(Data(y=labelled.y, num_nodes=n),
                            num_train_per_class=max(1, n // (10 * num_classes)),
                            num_val=n // 10, num_test=n // 5, seed=seed)
    for name in ("train_mask", "val_mask", "test_mask"):
        labelled[name] = masks[name]
    return data


def power_law(num_nodes: int = 100_000, num_edges: int = 300_000, num_channels: int = 64,
              num_classes: int = 10, *, exponent: float = 0.8, seed: int = 0) -> Data:
    """A synthetic undirected graph with power-law degrees (Chung-Lu).

    Real graphs are skewed: a few hubs sit in most neighbourhoods, which is
    what a feature cache or a partitioner is judged on, and what
    :func:`fake` (uniform random edges) lacks. Each edge's endpoints are drawn
    with probability proportional to ``rank ** -exponent``; self-loops are
    dropped and both directions stored.

    Args:
        num_nodes: Nodes.
        num_edges: Edges drawn before dropping self-loops and duplicates and
            adding the reverse direction.
        num_channels: Feature dimension of ``x`` (standard normal).
        num_classes: Label classes of ``y`` (uniform).
        exponent: Skew: 0 is uniform, larger is more skewed.
        seed: Seed of everything.
    """
    from torch_geometric.utils import to_undirected

    generator = torch.Generator().manual_seed(seed)
    weight = torch.arange(1, num_nodes + 1, dtype=torch.float64).pow(-exponent)
    ends = torch.multinomial(weight, 2 * num_edges, replacement=True, generator=generator)
    # Shuffled, so that the hubs are not the lowest ids (partitioners see ids).
    relabel = torch.randperm(num_nodes, generator=generator)
    ends = relabel[ends[torch.randperm(ends.numel(), generator=generator)]].view(2, -1)
    edge_index = to_undirected(ends[:, ends[0] != ends[1]], num_nodes=num_nodes)
    return Data(x=torch.randn(num_nodes, num_channels, generator=generator),
                y=torch.randint(0, num_classes, (num_nodes,), generator=generator),
                edge_index=edge_index, num_nodes=num_nodes)


def load_dataset(spec: str, search_cwd: bool = False) -> Union[Data, HeteroData]:
    """Resolves a ``"module:attribute"`` string to a graph, like uvicorn's app string.

    The attribute may be dotted (``"pkg.mod:obj.method"``). A callable is
    called with no arguments; a PyG dataset holding one graph yields that graph.

    Args:
        spec: ``"module:callable"``, e.g. ``"pyg_dist.datasets:cora"``.
        search_cwd: Put the current directory first on ``sys.path``, as
            uvicorn does (``--app-dir .``), so that ``mygraph:load`` finds
            ``./mygraph.py`` from the ``pyg-dist`` console script too (whose
            ``sys.path`` starts at its own directory). The CLI passes ``True``.

    Raises:
        DatasetResolveError: if the string is malformed, the module or the
            attribute does not exist, calling it fails, or it does not give a
            :class:`~torch_geometric.data.Data` or
            :class:`~torch_geometric.data.HeteroData`.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise DatasetResolveError(
            f"dataset {spec!r} is not of the form 'module:callable', e.g. "
            f"'pyg_dist.datasets:cora'")
    if search_cwd and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise DatasetResolveError(
            f"dataset {spec!r}: cannot import module {module_name!r} ({exc}); check "
            f"the spelling and that it is on PYTHONPATH") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise DatasetResolveError(
                f"dataset {spec!r}: {module_name!r} has no attribute {attr_path!r}") from exc
    if callable(obj) and not isinstance(obj, (Data, HeteroData)):
        try:
            obj = obj()
        except Exception as exc:
            raise DatasetResolveError(
                f"dataset {spec!r}: calling it raised {type(exc).__name__}: {exc}") from exc
    return _as_data(obj, spec)


def _as_data(obj: Any, spec: str) -> Union[Data, HeteroData]:
    from torch_geometric.data import Dataset

    if isinstance(obj, Dataset) and len(obj) == 1:
        obj = obj[0]
    if not isinstance(obj, (Data, HeteroData)):
        raise DatasetResolveError(
            f"dataset {spec!r} gave a {type(obj).__name__}, not a torch_geometric "
            f"Data or HeteroData; return one of those")
    return obj
