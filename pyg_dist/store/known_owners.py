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

When the coordinator also had the nodes' rows written into the batch's
outputs (:mod:`pyg_dist.store.tree_outputs`), they are remembered with the
grouping, and :func:`take_rows` hands them over in place of a fetch.

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


def remember(node: Tensor, shares: list[tuple[int, Tensor, Tensor]],
             rows: Optional[dict[str, Tensor]] = None) -> None:
    """Records ``shares`` (``(part, positions, node[positions])`` per owning
    part, as ``PartitionBook.split`` gives them) as the grouping of ``node``
    (1-D int64) on this thread, and ``rows``, the node features already
    written for it (name -> ``[len(node), ...]``), if any."""
    _local.known = [weakref.ref(node), node.data_ptr(), node.numel(), node._version,
                    shares, rows]


def _known_for(ids: Tensor) -> Optional[list]:
    """This thread's entry if it was remembered for exactly ``ids``."""
    known: Any = getattr(_local, "known", None)
    if known is None:
        return None
    ref, ptr, numel, version = known[:4]
    node = ref()
    if node is None:
        _local.known = None
        return None
    if ids.dtype != torch.int64 or ids.dim() != 1 or not ids.is_contiguous() or \
            ids.data_ptr() != ptr or ids.numel() != numel or ids._version != version or \
            node._version != version:
        return None
    return known


def take(ids: Tensor) -> Optional[list[tuple[int, Tensor, Tensor]]]:
    """The grouping remembered on this thread for exactly ``ids`` (see the
    module), once; ``None`` otherwise."""
    known = _known_for(ids)
    if known is None:
        return None
    shares, known[4] = known[4], None
    return shares


def take_rows(ids: Tensor, names: list[str]) -> Optional[list[Tensor]]:
    """The rows of ``names`` remembered on this thread for exactly ``ids``,
    once, when every one of them is there; ``None`` otherwise."""
    known = _known_for(ids)
    rows = None if known is None else known[5]
    if rows is None or any(name not in rows for name in names):
        return None
    known[5] = None
    return [rows[name] for name in names]


def forget() -> None:
    """Drops this thread's remembered grouping, if any."""
    _local.known = None
