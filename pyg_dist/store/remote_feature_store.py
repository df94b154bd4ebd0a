"""Trainer-side PyG :class:`~torch_geometric.data.FeatureStore` over partition servers.

Every request is routed by the partition book: the ids of a ``TensorAttr``
are grouped by owning server, each server gets one ``get`` request carrying
*all* the attributes asked for with that index, the requests fly at once,
and the rows are put back in the caller's order. PyG builds a batch with one
``multi_get_tensor`` call (``x``, ``y``, masks, ... all indexed by the
batch's nodes), so one batch costs one round trip per server. A server on the
same host writes a big answer straight into shared memory the store lends it
(:mod:`pyg_dist.rpc.shm`) instead of sending it over the socket.

The store is read-only: ``put_tensor`` / ``remove_tensor`` raise
:class:`~pyg_dist.errors.StoreError`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.typing import FeatureTensorType

from pyg_dist.errors import RemoteError, RpcTimeoutError, StoreError, TransportError
from pyg_dist.rpc import shm
from pyg_dist.rpc.shm import ClientSegments, Segment
from pyg_dist.rpc.wire_values import describe
from pyg_dist.store.routing import Router

logger = logging.getLogger(__name__)

_local = threading.local()


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
    ``index`` global node ids: an int64 tensor or numpy array, a boolean mask
    over all nodes, a slice, an int, or ``None`` for every node.

    Build it with :func:`pyg_dist.connect`.

    Args:
        router: Routes requests to the owning servers (shared with the graph
            store).
        features: ``{(group, name): FeatureInfo}`` for every feature served.
        server_hosts: Each part's server's host identity as its ``meta``
            reported it (:func:`pyg_dist.rpc.shm.host_id`); servers
            on this host get shared memory for big replies. ``None``: none.
        reply_limits: Each part's server's ``max_reply_bytes`` as its
            ``meta`` reported it; a share of a ``get`` whose answer would be
            bigger is asked for in several calls. ``None``: no limit known.
    """

    def __init__(self, router: Router, features: dict[tuple[Optional[str], str], FeatureInfo],
                 server_hosts: Optional[Sequence[Optional[str]]] = None,
                 reply_limits: Optional[Sequence[Optional[int]]] = None) -> None:
        super().__init__()
        self.router = router
        self.num_nodes = router.num_nodes
        self.features = dict(features)
        self._server_hosts = list(server_hosts or [None] * router.num_parts)
        self._reply_limits = list(reply_limits or [None] * router.num_parts)
        self._segments: Optional[ClientSegments] = None
        self._segments_lock = threading.Lock()
        self._segments_pid = os.getpid()

    def close(self) -> None:
        """Hands back the servers' mappings of this process's shared memory
        and closes the connections shared with the graph store."""
        self._forget_parents_segments()
        with self._segments_lock:
            segments, self._segments = self._segments, None
        if segments is not None:
            for part, keys in segments.close().items():
                try:
                    self.router.client.call(part, "release", {"segments": keys}, timeout=2.0)
                except Exception as exc:  # the server unmaps them at its bound anyway
                    logger.debug("release of %d segments on %s failed: %s", len(keys),
                                 self.router.endpoints[part], exc)
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
        ids, _ = self._to_ids(attr.index)
        return (ids.numel(), *info.shape)

    def _get_tensor(self, attr: TensorAttr) -> Optional[FeatureTensorType]:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[Optional[FeatureTensorType]]:
        """Fetches all ``attrs`` with one ``get`` request per server and index."""
        plan: dict[tuple[Any, Optional[str]], list[int]] = {}
        prepared: list[tuple[Tensor, bool]] = []
        for i, attr in enumerate(attrs):
            key = (attr.group_name, attr.attr_name)
            if key not in self.features:
                known = ", ".join(f"{g}/{n}" if g else n for g, n in self.features) or "none"
                raise StoreError(f"no feature {attr.attr_name!r} (group {attr.group_name!r}) "
                                 f"on the servers; they hold: {known}")
            prepared.append(self._to_ids(attr.index))
            # Attributes sharing one index object travel in one request.
            plan.setdefault((id(attr.index), attr.group_name), []).append(i)
        out: list[Optional[FeatureTensorType]] = [None] * len(attrs)
        for (_, group), members in plan.items():
            ids, scalar = prepared[members[0]]
            names = [attrs[i].attr_name for i in members]
            tensors = self._fetch(ids, group, names)
            for i, tensor in zip(members, tensors):
                out[i] = tensor[0] if scalar else tensor
        return out

    # Internals #############################################################

    def _to_ids(self, index: Any) -> tuple[Tensor, bool]:
        """Global int64 ids of a ``TensorAttr.index``, and whether it was scalar."""
        n = self.num_nodes
        if index is None:
            return torch.arange(n), False
        if isinstance(index, slice):
            return torch.arange(n)[index], False
        if isinstance(index, (int, np.integer)):
            i = int(index) + n if int(index) < 0 else int(index)
            return self.router.check_ids(torch.tensor([i]), "TensorAttr.index"), True
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
        return self.router.check_ids(index.view(-1).cpu(), "TensorAttr.index"), False

    def _forget_parents_segments(self) -> None:
        # In a forked child (DataLoader workers) the parent's segments are the
        # parent's, and its lock may have been copied held by a thread that
        # does not exist here: start over without touching either.
        if self._segments_pid != os.getpid():
            self._segments_lock = threading.Lock()
            self._segments = None
            self._segments_pid = os.getpid()

    def _segment_pools(self) -> ClientSegments:
        self._forget_parents_segments()
        with self._segments_lock:
            if self._segments is None:
                limit = self.router.client.config.shared_memory_bytes
                self._segments = ClientSegments(self.router.endpoints, self._server_hosts, limit)
            return self._segments

    def _fetch(self, ids: Tensor, group: Optional[str], names: list[str]) -> list[Tensor]:
        """Rows ``ids`` of features ``names`` of ``group``, in the order of ``ids``."""
        infos = [self.features[(group, name)] for name in names]
        pin = getattr(_local, "pinned", False)
        outs = [torch.empty((ids.numel(), *info.shape), dtype=info.dtype, pin_memory=pin)
                for info in infos]
        if ids.numel() == 0:
            return outs
        row_bytes = sum(math.prod(out.shape[1:]) * out.element_size() for out in outs)
        shares = self._within_reply_limits(self.router.split(ids), row_bytes)
        # A server that lost a segment (it restarted) costs one more try; a
        # server that cannot map one at all gets no more (its pool is off).
        # What still fails goes over the socket, with the config's retries.
        for _ in range(3):
            done = self._fetch_shares(shares, group, names, outs)
            if done:
                return outs
            if done is None:
                break
        self._fetch_shares(shares, group, names, outs, lend=False)
        return outs

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

    def _fetch_shares(self, shares: list[tuple[int, Tensor, Tensor]], group: Optional[str],
                      names: list[str], outs: list[Tensor], lend: bool = True
                      ) -> Optional[bool]:
        """Asks every server for its share, lending a segment where it can.

        Returns ``True`` when done, ``False`` if a server could not use its
        segment (try again), ``None`` if a call into lent memory failed and
        the config wants retries (which go over the socket).
        """
        pools = self._segment_pools()
        row_bytes = [math.prod(out.shape[1:]) * out.element_size() for out in outs]
        requests, lent, drops = [], [], []
        for part, positions, part_ids in shares:
            args: dict[str, Any] = {"attrs": names, "group": group}
            pool = pools.pool(part)
            _, total = shm.layout([positions.numel() * b for b in row_bytes])
            segment = pool.acquire(total) if lend else None
            drop = pool.take_dropped() if segment is not None else []
            if segment is not None:
                args["shm"] = segment.spec(drop)
            requests.append((part, "get", args, [part_ids]))
            lent.append(segment)
            drops.append(drop)
        any_lent = any(segment is not None for segment in lent)
        try:
            # No re-sends into lent memory: a late first attempt could write
            # into a segment already reused for the next batch.
            replies = self.router.call_all(requests, retry=not any_lent)
            for (part, positions, _), reply, segment in zip(shares, replies, lent):
                self._take_reply(part, positions, reply, segment, names, outs)
        except BaseException as exc:
            # Requests may still be in flight: their segments are never reused,
            # and the segments they asked to drop are asked again next time.
            for (part, _, _), segment, drop in zip(shares, lent, drops):
                if segment is not None:
                    pools.pool(part).restore_dropped(drop)
                    pools.pool(part).discard(segment)
            if any_lent and isinstance(exc, (RpcTimeoutError, TransportError)) \
                    and self.router.client.config.retries:
                logger.info("a fetch into shared memory failed (%s); retrying over the socket",
                            exc)
                return None
            if not (isinstance(exc, RemoteError) and exc.remote_type == "SharedMemoryError"
                    and exc.address in self.router.endpoints):
                raise
            part = self.router.endpoints.index(exc.address)
            segment = dict(zip((p for p, _, _ in shares), lent)).get(part)
            if segment is not None and not segment.announced:
                pools.pool(part).disable(exc.remote_message)  # it cannot map ours at all
            else:
                pools.pool(part).discard_idle()  # it lost them: restarted, or over its bound
            return False
        for (part, _, _), segment in zip(shares, lent):
            if segment is not None:
                pools.pool(part).release(segment)
        return True

    def _take_reply(self, part: int, positions: Tensor, reply: Any,
                    segment: Optional[Segment], names: list[str], outs: list[Tensor]) -> None:
        address = self.router.endpoints[part]
        if segment is not None:
            segment.announce()
            offsets = reply.result.get("shm_offsets")
            if not isinstance(offsets, list) or len(offsets) != len(names) \
                    or not all(isinstance(o, int) for o in offsets):
                raise StoreError(f"server {address} answered 'get' into shared memory "
                                 f"without one offset per attribute: got {describe(offsets)}")
            tensors = [shm.view(segment.payload, offset, out.dtype,
                                          (positions.numel(), *out.shape[1:]))
                       for offset, out in zip(offsets, outs)]
        else:
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
