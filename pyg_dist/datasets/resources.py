"""Where the real graphs live: the ``graphdatascience`` wheel's parquet files,
found with :func:`importlib.util.find_spec` without importing the package
(its import pulls in a Neo4j driver, pandas and more that a trainer does
not need), and the train/val/test masks every loader here adds.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from pyg_dist.errors import DatasetResolveError


def resource_dir(name: str, probe: str) -> Path:
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
    forked RNG (:func:`seeded`), so the masks depend on ``seed`` only and the
    caller's global RNG state is untouched.

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
    return seeded(seed, lambda: split(data))


def split_labelled(store: Any, seed: int, train: float, val: float) -> None:
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


def node_positions(node_ids: np.ndarray, ids: np.ndarray, what: str,
                   order: np.ndarray | None = None) -> np.ndarray:
    """Where each of ``ids`` stands in ``node_ids`` (sorted, or sorted by the
    permutation ``order``), by one sorted lookup.

    Raises:
        DatasetResolveError: naming ``what`` (e.g. ``"IMDB's acted_in"``) if
            an id is not in ``node_ids``: the wheel is damaged.
    """
    sorted_ids = node_ids if order is None else node_ids[order]
    pos = np.searchsorted(sorted_ids, ids).clip(max=max(sorted_ids.size - 1, 0))
    if not np.array_equal(sorted_ids[pos], ids):
        raise DatasetResolveError(f"{what} names nodes that are not in its node files; "
                                  f"the graphdatascience wheel is damaged")
    return pos if order is None else order[pos]


def seeded(seed: int, make: Callable[[], Any]) -> Any:
    """``make()`` with torch's and Python's RNGs seeded with ``seed``, both
    restored afterwards (PyG's fake datasets draw from both)."""
    state = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            return make()
    finally:
        random.setstate(state)
