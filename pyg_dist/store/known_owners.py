"""A batch's node ids already grouped by owner, handed from sampler to feature fetch.

A ``sample_tree`` coordinator answers a homogeneous tree's nodes grouped by
owning part (:mod:`pyg_dist.protocol.tree_owners`); the sampler
(:mod:`pyg_dist.sampler.server_hops`) :func:`remember` s that grouping for
the tree's node tensor, and when the same thread then asks the
:class:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore` for rows of
those very ids (the batch's ``n_id``), :func:`take` hands it over instead
of a lookup of every id in the partition book (~0.8 ms of a batch of 145k
nodes). "Those very ids" means the same memory, unchanged since: the same
data pointer, length and dtype, and the same version counter (an in-place
change, e.g. by a ``transform_sampler_output``, bumps it), while the node
tensor is alive. Anything else gets ``None`` and is split as always.

One grouping per thread (a prefetching loader produces each batch on one
thread, sampling then fetching), replaced by the next tree's.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Optional

import torch
from torch import Tensor

_local = threading.local()


def remember(node: Tensor, shares: list[tuple[int, Tensor, Tensor]]) -> None:
    """Records ``shares`` (``(part, positions, node[positions])`` per owning
    part, as ``PartitionBook.split`` gives them) as the grouping of ``node``
    (1-D int64) on this thread."""
    _local.known = (weakref.ref(node), node.data_ptr(), node.numel(), node._version, shares)


def take(ids: Tensor) -> Optional[list[tuple[int, Tensor, Tensor]]]:
    """The grouping remembered on this thread for exactly ``ids`` (see the
    module), once; ``None`` otherwise."""
    known: Any = getattr(_local, "known", None)
    if known is None:
        return None
    ref, ptr, numel, version, shares = known
    node = ref()
    if node is None:
        _local.known = None
        return None
    if ids.dtype != torch.int64 or ids.dim() != 1 or not ids.is_contiguous() or \
            ids.data_ptr() != ptr or ids.numel() != numel or ids._version != version or \
            node._version != version:
        return None
    _local.known = None
    return shares


def forget() -> None:
    """Drops this thread's remembered grouping, if any."""
    _local.known = None
