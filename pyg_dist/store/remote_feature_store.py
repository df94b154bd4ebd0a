"""Trainer-side PyG :class:`~torch_geometric.data.FeatureStore` over partition servers.

Every request is routed by the partition book: the ids of a ``TensorAttr``
are grouped by owning server, each server gets one ``get`` request carrying
*all* the attributes asked for with that index, the requests fly at once,
and the rows are put back in the caller's order. PyG builds a batch with one
``multi_get_tensor`` call (``x``, ``y``, masks, ... all indexed by the
batch's nodes), so one batch costs one round trip per server. Each request
says how many bytes its answer takes, so that the RPC client can lend a
server on the same host shared memory for it (:mod:`pyg_dist.rpc.shm`)
instead of the answer crossing the socket; the store only asks for rows.

The store is read-only: ``put_tensor`` / ``remove_tensor`` raise
:class:`~pyg_dist.errors.StoreError`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.typing import FeatureTensorType

from pyg_dist.errors import StoreError
from pyg_dist.store.routing import Router

logger = logging.getLogger(__name__)

_local = threading.local()


def outputs_pinned() -> bool:
    """Whether this thread is inside :func:`pinned_outputs`."""
    return getattr(_local, "pinned", False)


@contextlib.contextmanager
def pinned_outputs() -> Iterator[None]:
    """Within this block, on this thread, fetched features land in pinned memory.

    A loader that copies batches to a GPU sets it, so rows are assembled
    straight into page-locked buffers (CUDA's host allocator recycles them)
    that a ``non_blocking`` copy can read, instead of a pageable tensor that
    ``pin_memory()`` would copy once more.
    """
    before = getattr(_local, "pinned", False)
    _local.pinned = True
    try:
        yield
    finally:
        _local.pinned = before


# Widest element types a row is copied as, with their sizes in bytes.
_COPY_DTYPES = ((torch.complex128, 16), (torch.int64, 8), (torch.int32, 4),
                (torch.int16, 2), (torch.uint8, 1))


def copy_rows(out: Tensor, positions: Tensor, rows: Tensor) -> None:
    """``out[positions] = rows`` for contiguous tensors of one dtype.

    ``index_copy_`` moves one element at a time, so a row of 128 float32
    costs 128 moves; the rows are reinterpreted as the widest type their
    byte size allows (16-byte elements: 8 moves), which copies the same bits
    (a float NaN's payload included) 20-25% faster. Anything else falls back to
    a plain ``index_copy_``.

    Args:
        out: Destination, ``[N, ...]``.
        positions: int64 rows of ``out`` to fill, one per row of ``rows``.
        rows: Source, ``[len(positions), ...]``, same dtype and row shape.
    """
    if positions.numel() == 0:
        return  # nothing to copy (and an empty view cannot be widened)
    row_bytes = out[0].numel() * out.element_size() if out.numel() else 0
    if out.is_contiguous() and rows.is_contiguous() and out.dtype == rows.dtype \
            and row_bytes and out.dtype != torch.bool:
        for dtype, size in _COPY_DTYPES:
            if row_bytes % size == 0 and out.data_ptr() % size == 0 \
                    and rows.data_ptr() % size == 0:
                wide_out = out.view(out.size(0), -1).view(torch.uint8).view(dtype)
                wide_rows = rows.view(rows.size(0), -1).view(torch.uint8).view(dtype)
                wide_out.index_copy_(0, positions, wide_rows)
                return
    out.index_copy_(0, positions, rows)


@dataclass(frozen=True)
class FeatureInfo:
    """What the servers report about one node feature.

    Args:
        dtype: Its torch dtype.
        shape: Its shape *without* the node dimension (``()`` for labels).
    """

    dtype: torch.dtype
    shape: tuple[int, ...]


class RemoteFeatureStore(FeatureStore):
    """A read-only PyG ``FeatureStore`` whose node features live on partition servers.

    ``TensorAttr.group_name`` is the node type (``None`` for a homogeneous
    graph), ``attr_name`` the feature (``x``, ``y``, ``train_mask``, ...), and
    ``index`` global node ids (numbered per node type on a heterogeneous
    graph, as in PyG's ``HeteroData``): an int64 tensor or numpy array, a
    boolean mask over all nodes of the type, a slice, an int, or ``None`` for
    every node.

    Build it with :func:`pyg_dist.connect`.

    Args:
        router: Routes requests to the owning servers (shared with the graph
            store).
        features: ``{(group, name): FeatureInfo}`` for every feature served.
        reply_limits: Each part's server's ``max_reply_bytes`` as its
            ``meta`` reported it; a share of a ``get`` whose answer would be
            bigger is asked for in several calls. ``None``: no limit known.
    """

    def __init__(self, router: Router, features: dict[tuple[Optional[str], str], FeatureInfo],
                 reply_limits: Optional[Sequence[Optional[int]]] = None) -> None:
        super().__init__()
        self.router = router
        self.num_nodes = router.num_nodes
        self.features = dict(features)
        self._reply_limits = list(reply_limits or [None] * router.num_parts)
        # Set by connect() from the servers' meta: the graph's identity, and
        # each part's server's host identity (pyg_dist.rpc.shm.host_id).
        self.graph_id: Any = None
        self.server_hosts: list[Optional[str]] = [None] * router.num_parts

    def local_parts(self) -> list[int]:
        """The parts whose servers run on this host (as their ``meta`` said)."""
        from pyg_dist.rpc.shm import host_id

        here = host_id()
        return [part for part, host in enumerate(self.server_hosts)
                if host is not None and host == here]

    def node_ids(self, index: Any, node_type: Optional[str] = None) -> tuple[Tensor, bool]:
        """Global int64 ids of a ``TensorAttr.index`` of ``node_type`` (see
        the class docstring for the forms it takes), checked against the
        graph, and whether it was a scalar.

        Raises:
            StoreError: for an index of another type or out of range.
            UnknownTypeError, GraphKindMismatchError: for a node type the
                graph does not have.
        """
        return self._to_ids(index, node_type)

    def close(self) -> None:
        """Closes the connections shared with the graph store (the RPC
        client hands back the memory it lent)."""
        self.router.close()

    def __enter__(self) -> RemoteFeatureStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # PyG FeatureStore interface ############################################

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """Every feature the servers hold, without an index."""
        return [self._tensor_attr_cls.cast(group, name) for group, name in self.features]

    def _put_tensor(self, tensor: FeatureTensorType, attr: TensorAttr) -> bool:
        raise StoreError("RemoteFeatureStore is read-only: features live on the partition "
                         "servers; partition the changed graph again instead")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise StoreError("RemoteFeatureStore is read-only: features live on the partition "
                         "servers; partition the changed graph again instead")

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[tuple[int, ...]]:
        info = self.features.get((attr.group_name, attr.attr_name))
        if info is None:
            return None
        ids, _ = self._to_ids(attr.index, attr.group_name)
        return (ids.numel(), *info.shape)

    def _get_tensor(self, attr: TensorAttr) -> Optional[FeatureTensorType]:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[Optional[FeatureTensorType]]:
        """Fetches all ``attrs`` with one ``get`` request per server, index
        and node type, all in flight at once (one round trip)."""
        plan: dict[tuple[Any, Optional[str]], list[int]] = {}
        prepared: list[tuple[Tensor, bool]] = []
        for i, attr in enumerate(attrs):
            key = (attr.group_name, attr.attr_name)
            if key not in self.features:
                self.router.book_of(attr.group_name)  # an unknown node type says so
                known = ", ".join(f"{g}/{n}" if g else n for g, n in self.features) or "none"
                raise StoreError(f"no feature {attr.attr_name!r} (group {attr.group_name!r}) "
                                 f"on the servers; they hold: {known}")
            prepared.append(self._to_ids(attr.index, attr.group_name))
            # Attributes sharing one index object travel in one request.
            plan.setdefault((id(attr.index), attr.group_name), []).append(i)
        fetches = [(group, prepared[members[0]][0], [attrs[i].attr_name for i in members])
                   for (_, group), members in plan.items()]
        out: list[Optional[FeatureTensorType]] = [None] * len(attrs)
        for members, tensors in zip(plan.values(), self._fetch(fetches)):
            scalar = prepared[members[0]][1]
            for i, tensor in zip(members, tensors):
                out[i] = tensor[0] if scalar else tensor
        return out

    # Internals #############################################################

    def _to_ids(self, index: Any, node_type: Optional[str] = None) -> tuple[Tensor, bool]:
        """Global int64 ids of a ``TensorAttr.index`` of ``node_type``, and
        whether it was scalar."""
        n = self.router.num_nodes_of(node_type)
        if index is None:
            return torch.arange(n), False
        if isinstance(index, slice):
            return torch.arange(n)[index], False
        if isinstance(index, (int, np.integer)):
            i = int(index) + n if int(index) < 0 else int(index)
            return self.router.check_ids(torch.tensor([i]), "TensorAttr.index", node_type), True
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        if not isinstance(index, Tensor):
            raise StoreError(f"TensorAttr.index must be a tensor, numpy array, slice, int "
                             f"or None, got {type(index).__name__}")
        if index.dtype == torch.bool:
            if index.numel() != n:
                raise StoreError(f"a boolean TensorAttr.index must have one entry per node "
                                 f"({n}), got {index.numel()}")
            return index.nonzero().view(-1), False
        return self.router.check_ids(index.view(-1).cpu(), "TensorAttr.index", node_type), False

    def _fetch(self, fetches: list[tuple[Optional[str], Tensor, list[str]]]
               ) -> list[list[Tensor]]:
        """For every ``(group, ids, names)``, the rows ``ids`` of features
        ``names`` of node type ``group``, in the order of ``ids``; the
        requests of all of them fly at once."""
        pin = outputs_pinned()
        outs_of, requests, sizes, targets = [], [], [], []
        for group, ids, names in fetches:
            outs = [torch.empty((ids.numel(), *info.shape), dtype=info.dtype, pin_memory=pin)
                    for info in (self.features[(group, name)] for name in names)]
            outs_of.append(outs)
            if ids.numel() == 0:
                continue
            row_bytes = sum(math.prod(out.shape[1:]) * out.element_size() for out in outs)
            for part, positions, part_ids in self._within_reply_limits(
                    self.router.split(ids, group), row_bytes):
                requests.append((part, "get", {"attrs": names, "group": group}, [part_ids]))
                sizes.append(positions.numel() * row_bytes)
                targets.append((part, positions, names, outs))
        if not requests:
            return outs_of
        replies = self.router.call_all(requests, reply_bytes=sizes)
        try:
            for (part, positions, names, outs), reply in zip(targets, replies):
                self._take_reply(part, positions, reply, names, outs)
        finally:
            for reply in replies:  # rows copied out: lent memory may be reused
                reply.release()
        return outs_of

    def _within_reply_limits(self, shares: list[tuple[int, Tensor, Tensor]], row_bytes: int
                             ) -> list[tuple[int, Tensor, Tensor]]:
        """Splits every share whose answer would exceed its server's reply
        limit into shares that fit (they fly together like the others)."""
        out = []
        for part, positions, part_ids in shares:
            limit = self._reply_limits[part]
            if limit is None or positions.numel() * row_bytes <= limit:
                out.append((part, positions, part_ids))
                continue
            step = max(1, limit // max(1, row_bytes))
            out += [(part, positions[i:i + step], part_ids[i:i + step])
                    for i in range(0, positions.numel(), step)]
        return out

    def _take_reply(self, part: int, positions: Tensor, reply: Any, names: list[str],
                    outs: list[Tensor]) -> None:
        address = self.router.endpoints[part]
        tensors = list(reply.tensors)
        if len(tensors) != len(names):
            raise StoreError(f"server {address} answered 'get' with "
                             f"{len(tensors)} tensors for {len(names)} attributes")
        for out, name, tensor in zip(outs, names, tensors):
            expected = (positions.numel(), *out.shape[1:])
            if tuple(tensor.shape) != expected:
                raise StoreError(f"server {address} sent {name!r} of shape "
                                 f"{tuple(tensor.shape)}, expected {expected}")
            copy_rows(out, positions, tensor.to(out.dtype))

    def __repr__(self) -> str:
        names = ", ".join(n for _, n in self.features)
        return (f"{self.__class__.__name__}(num_nodes={self.num_nodes}, "
                f"features=[{names}], num_parts={self.router.num_parts})")
