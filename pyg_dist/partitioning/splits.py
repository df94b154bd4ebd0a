"""Index splits and a transform applied to a graph as it is partitioned.

A PyG script holds its splits as index tensors (OGB's ``get_idx_split()``)
and applies simple transforms (``T.ToUndirected()``) before building its
loaders. :func:`pyg_dist.partition` takes both (``splits=``,
``transform=``) so that a script can partition what it trains on without a
``module:callable`` for ``pyg-dist partition``: each split is stored as a
boolean node mask named ``<split>_mask`` (``train_mask``, ...), what
``pyg_dist.RemoteData()`` then serves next to ``x`` and ``y``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning.inputs import is_hetero_data


def with_splits(data: Any, splits: Optional[Mapping[str, Any]],
                transform: Optional[Callable[[Any], Any]]) -> Any:
    """``data`` transformed, with a ``<name>_mask`` per split; the caller's
    ``data`` is not modified.

    Args:
        data: A ``Data`` or ``HeteroData``.
        splits: ``{name: ids or mask}`` on a homogeneous graph; on a
            heterogeneous one ``{name: {node_type: ids or mask}}`` (OGB's
            layout), or ``None``.
        transform: Applied to (a copy of) ``data`` first, e.g.
            ``torch_geometric.transforms.ToUndirected()``, or ``None``.

    Raises:
        InvalidPartitionArgumentError: a split name that is no identifier or
            whose mask exists already, ids out of range, a mask of the wrong
            length, or a layout that does not fit the graph.
    """
    if transform is not None:
        if not callable(transform):
            raise InvalidPartitionArgumentError(
                f"transform must be callable (e.g. T.ToUndirected()), got "
                f"{type(transform).__name__}")
        data = transform(copy.copy(data))
    if not splits:
        return data
    if not isinstance(splits, Mapping):
        raise InvalidPartitionArgumentError(
            f"splits must be a dict {{name: ids}}, got {type(splits).__name__}")
    data = copy.copy(data)
    hetero = is_hetero_data(data)
    for name, value in splits.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidPartitionArgumentError(
                f"split name {name!r} cannot name an attribute; use e.g. 'train', 'valid'")
        attr = f"{name}_mask"
        if hetero != isinstance(value, Mapping):
            want = "{node_type: ids}" if hetero else "ids or a mask"
            raise InvalidPartitionArgumentError(
                f"split {name!r} on a {'heterogeneous' if hetero else 'homogeneous'} graph "
                f"takes {want}, got {type(value).__name__}")
        stores = [(value_type, data[value_type], ids) for value_type, ids in value.items()] \
            if hetero else [(None, data, value)]
        for node_type, store, ids in stores:
            if hetero and node_type not in data.node_types:
                raise InvalidPartitionArgumentError(
                    f"split {name!r} names node type {node_type!r}; the graph has "
                    f"{data.node_types}")
            if attr in store:
                raise InvalidPartitionArgumentError(
                    f"the graph already has {attr}{_of(node_type)}; drop it or the split "
                    f"{name!r}")
            store[attr] = _mask(ids, store.num_nodes, f"split {name!r}{_of(node_type)}")
    return data


def _of(node_type: Optional[str]) -> str:
    return "" if node_type is None else f" of node type {node_type!r}"


def _mask(ids: Any, num_nodes: int, what: str) -> Tensor:
    """A boolean mask over ``num_nodes`` from ids or a mask."""
    ids = ids if isinstance(ids, Tensor) else torch.as_tensor(ids)
    if ids.dtype == torch.bool:
        if ids.dim() != 1 or ids.numel() != num_nodes:
            raise InvalidPartitionArgumentError(
                f"{what}: a mask needs one entry per node ({num_nodes}), got shape "
                f"{tuple(ids.shape)}")
        return ids.clone()
    if ids.is_floating_point() or ids.is_complex():
        raise InvalidPartitionArgumentError(f"{what}: node ids must be integers, got "
                                            f"{ids.dtype}")
    ids = ids.reshape(-1).long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise InvalidPartitionArgumentError(
            f"{what}: node ids must lie in [0, {num_nodes}), got min {int(ids.min())}, max "
            f"{int(ids.max())}")
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[ids] = True
    return mask
