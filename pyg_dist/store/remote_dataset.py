"""``RemoteDataset``: the served graph seen like a one-graph PyG dataset.

A PyG script starts from a dataset, ``dataset = Reddit(path)`` or OGB's
``PygNodePropPredDataset(...)``, and reads ``dataset[0]``,
``dataset.num_features``, ``dataset.num_classes`` and, with OGB,
``dataset.get_idx_split()``. Over partition servers
(:func:`pyg_dist.init_trainer` returns one) the same lines work:
``dataset[0]`` is the :class:`~pyg_dist.store.remote_data.RemoteData`, and
the index splits are the served ``<name>_mask`` node masks
(``pyg_dist.partition(..., splits=...)`` writes them).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from pyg_dist.errors import StoreError
from pyg_dist.store.remote_data import RemoteData


class RemoteDataset:
    """A dataset of one graph, the one the partition servers serve.

    Args:
        data: The served graph (:class:`RemoteData`).
    """

    def __init__(self, data: RemoteData) -> None:
        self.data = data

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> RemoteData:
        if index not in (0, -1):
            raise IndexError(f"a served graph is a dataset of one graph; index {index!r} is "
                             f"out of range")
        return self.data

    @property
    def num_features(self) -> int:
        """Columns of ``x``, as PyG's ``Dataset.num_features``."""
        return self.data.num_features

    @property
    def num_node_features(self) -> int:
        """Columns of ``x``, as PyG's ``Dataset.num_node_features``."""
        return self.data.num_node_features

    @property
    def num_classes(self) -> int:
        """Classes of ``y``, as PyG's ``Dataset.num_classes``."""
        return self.data.num_classes

    def get_idx_split(self) -> dict[str, Tensor]:
        """``{name: node ids}`` for every served ``<name>_mask``, as OGB's
        ``get_idx_split()`` (``train``, ``valid``, ``test``, ...).

        Raises:
            StoreError: if the servers hold no ``*_mask`` attribute.
        """
        names = [k[:-len("_mask")] for k in self.data.keys() if k.endswith("_mask")]
        if not names:
            raise StoreError(f"the served graph has no split masks (*_mask) among "
                             f"{self.data.keys()}; pass splits= to pyg_dist.partition")
        return {name: getattr(self.data, f"{name}_mask").nonzero().view(-1) for name in names}

    def close(self) -> None:
        """Closes the connections to the servers."""
        self.data.close()

    def __repr__(self) -> str:
        return f"RemoteDataset({self.data!r})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "data":
            raise AttributeError(name)
        return getattr(self.data, name)
