"""Output buffers lent to every same-host server at once: rows written in place.

A ``get`` reply lent shared memory (:mod:`pyg_dist.rpc.shm.lender`) still
leaves the trainer one copy: each server's rows arrive in that server's
segment, in the order of its share, and have to be scattered into the
batch's ``x`` (~40 MB a batch at fan-out [15, 10], about 40% of the
trainer's CPU time per batch on two cores). Here the trainer allocates the
batch's outputs themselves (``x``, ``y``, ...) inside one segment, lends it
to every server on its host, and sends each server the positions its rows
take; the server writes them there (a scatter in place of the gather it
does anyway) and the trainer copies nothing.

* :class:`OutputPool` (one per trainer process and cluster) holds the
  segments. A segment is named to several servers at once, so its
  descriptor stays open for them (``/proc/PID/fd/FD``) until every server
  asked in its first batch has answered; then the client closes it. A
  segment has no file, so nothing is left behind however the trainer ends.
  A server first asked in a later batch cannot map it: it refuses, its rows
  come through a reply, and the segment is given up after that batch so
  that the next one starts afresh.
* :class:`OutputLease` is one batch's outputs. Its tensors view a
  ``memoryview`` of the segment that nothing else references, so the
  segment returns to the pool exactly when the last tensor sharing that
  memory is gone (``batch.x``, a slice of it, a numpy array over it): a
  held batch keeps its segment, a dropped one gives it back, and the pool
  grows (within ``limit_bytes``) while the user holds many; beyond that the
  caller falls back to ordinary tensors.

A lease may also hold, after its outputs, the requests' ids and the output
row of each (:meth:`OutputLease.index_share`): a ``get`` then names them
(``place.index``) instead of sending them, and the server reads them from
the segment it maps anyway (:meth:`CallContext.placed_index
<pyg_dist.rpc.context.CallContext.placed_index>`).

A batch bound for a CUDA device asks for a page-locked lease: its segment
is registered with CUDA once (:mod:`pyg_dist.rpc.shm.page_lock`) and stays
registered while the pool keeps it, so the servers' rows are written straight
into memory the copy to the device reads, and nothing on the trainer copies or
pins them again. A segment is unregistered when it is given up while no view
of it is alive; one still viewed when the pool closes stays registered until
the process exits (unregistering memory a copy may still read is undefined).

A segment some server may still write into (its call failed or timed out)
is never reused. Servers validate everything (:meth:`CallContext.placed
<pyg_dist.rpc.context.CallContext.placed>`): the segment's token, that each
output region lies inside it, and every position.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import torch

from pyg_dist.errors import SharedMemoryError
from pyg_dist.rpc.shm.files import HEADER_BYTES, Segment, layout, view
from pyg_dist.rpc.shm.lending import acquire_segment
from pyg_dist.rpc.shm.page_lock import page_lock, page_unlock

logger = logging.getLogger(__name__)


class OutputLease:
    """One request's outputs in a pooled segment.

    Args:
        pool: The pool the segment came from.
        segment: The segment.
        specs: ``(dtype, shape)`` of each output.
        index_ids: Room after the outputs for this many ids and as many
            output rows (int64 each): the servers' shares of the request,
            which they read from the segment instead of the socket
            (:meth:`index_share`).
    """

    def __init__(self, pool: OutputPool, segment: Segment,
                 specs: Sequence[tuple[torch.dtype, Sequence[int]]],
                 index_ids: int = 0) -> None:
        self.pool = pool
        self.segment = segment
        self.rows = int(specs[0][1][0]) if specs else 0
        offsets, end = layout([math.prod(shape) * dtype.itemsize for dtype, shape in specs])
        self.offsets = offsets
        self._index_offset = end
        self._index_free = 2 * int(index_ids)  # int64 slots left for shares
        # Whether a server may still write into it; shared with the
        # finalizer, which must not reference the lease (its tensors would
        # keep the memory alive for ever).
        self._spoiled = [False]
        # A memoryview only these tensors reference: when the last view of it
        # dies the segment goes back to the pool (see the module docstring).
        memory = memoryview(segment.mapping)[HEADER_BYTES:HEADER_BYTES + segment.size]
        payload = torch.frombuffer(memory, dtype=torch.uint8)
        weakref.finalize(memory, pool._returned, segment, self._spoiled)
        del memory
        self.tensors = [view(payload, offset, dtype, shape)
                        for offset, (dtype, shape) in zip(offsets, specs)]
        # Not one of `tensors`: nobody holds it past the request, but it
        # keeps the memory alive while the lease is (as `tensors` do).
        self._index = view(payload, end, torch.int64, (self._index_free,))

    def index_share(self, ids: Any, positions: Any) -> Optional[dict[str, int]]:
        """Writes one server's share (``ids``, then the output row of each,
        int64) into the room after the outputs and returns the ``index``
        field of its ``place`` argument (``offset`` in bytes into the
        payload, ``count``), or ``None`` when no room is left (the share
        then travels as tensors)."""
        count = int(ids.numel())
        start = self._index.numel() - self._index_free
        if 2 * count > self._index_free:
            return None
        self._index_free -= 2 * count
        self._index[start:start + count].copy_(ids)
        self._index[start + count:start + 2 * count].copy_(positions)
        return {"offset": self._index_offset + 8 * start, "count": count}

    def room(self) -> dict[str, int]:
        """The room for shares after the outputs, all of it, for another
        process to write shares into (a tree's coordinator:
        :meth:`CallContext.placed_room
        <pyg_dist.rpc.context.CallContext.placed_room>`): ``offset`` in
        bytes into the payload and ``slots``, int64 each."""
        return {"offset": self._index_offset, "slots": int(self._index.numel())}

    def arg(self, part: int) -> dict[str, Any]:
        """The ``place`` argument of a request to ``part``'s server."""
        return {"shm": self.pool._spec(self.segment, part), "offsets": list(self.offsets),
                "rows": self.rows}

    def placed(self, part: int) -> None:
        """``part``'s server answered a request naming the segment: it holds
        it mapped."""
        self.pool._mapped_by(self.segment, part)

    def spoil(self) -> None:
        """A server may still write into the segment (its call failed): it is
        given up once the outputs are dropped, never reused."""
        self._spoiled[0] = True

    def lost(self, part: int) -> None:
        """``part``'s call failed (timed out, lost its server): the server
        may hold the segment mapped and may still write into it, so it is
        given up, and the server is told to unmap it."""
        with self.pool._lock:
            self.pool._mapped.get(self.segment, set()).add(part)
        self.spoil()

    def settle(self) -> None:
        """Every server asked in this batch has answered: the segment's
        descriptor goes (the mappings live on)."""
        self.segment.announce()

    def refused(self, part: int) -> None:
        """``part``'s server answered ``SharedMemoryError``: it lost the
        segment (it restarted, or unmapped it at its bound) or cannot map ours
        at all; the caller fetches its rows another way."""
        self.pool._refused(self.segment, part)
        self.spoil()


class OutputPool:
    """A trainer process's output segments, lent to the same-host servers.

    Args:
        limit_bytes: Most payload bytes of segments held at once.
        parts: The servers (by index) that run on this host.
    """

    def __init__(self, limit_bytes: int, parts: Iterable[int]) -> None:
        self.limit_bytes = int(limit_bytes)
        self.parts = set(parts)
        # Reentrant: a batch's last view may die in a garbage collection that
        # runs while this thread holds the lock, and its finalizer takes it.
        self._lock = threading.RLock()
        self._free: list[Segment] = []
        self._all: set[Segment] = set()
        self._mapped: dict[Segment, set[int]] = {}
        self._dropped: dict[int, list[list[str]]] = {}
        self._refusals: dict[int, int] = {}
        # Segments registered with CUDA -> the pointer they were registered at.
        self._locked: dict[Segment, int] = {}
        self._lock_failed = False
        self._held = 0
        self._closed = False
        self._pid = os.getpid()

    @property
    def held_bytes(self) -> int:
        """Payload bytes of the segments that exist now."""
        return self._held

    @property
    def free_segments(self) -> int:
        """Segments waiting for reuse."""
        with self._lock:
            return len(self._free)

    def places(self, part: int) -> bool:
        """Whether requests to ``part`` may write into the pool's segments."""
        return part in self.parts and not self._closed

    @property
    def page_locked_segments(self) -> int:
        """Segments registered with CUDA (page-locked) now."""
        with self._lock:
            return len(self._locked)

    def lease(self, specs: Sequence[tuple[torch.dtype, Sequence[int]]],
              page_locked: bool = False, index_ids: int = 0) -> Optional[OutputLease]:
        """Outputs of ``(dtype, shape)`` (same first dimension) in one
        segment, or ``None`` (the pool is full, closed or failed, or
        ``page_locked`` was asked and CUDA cannot lock the segment: allocate
        them as usual).

        Args:
            specs: ``(dtype, shape)`` of each output.
            page_locked: The outputs go to a CUDA device: the segment is
                registered with CUDA (once; it stays registered for reuse).
            index_ids: Room for this many ids and their output rows after
                the outputs (:meth:`OutputLease.index_share`).
        """
        if not self.parts or self._closed or os.getpid() != self._pid or \
                (page_locked and self._lock_failed):
            return None
        _, total = layout([math.prod(shape) * dtype.itemsize for dtype, shape in specs]
                          + [16 * int(index_ids)])
        segment = self._acquire(max(total, 1))
        if segment is None:
            return None
        if page_locked and not self._page_lock(segment):
            with self._lock:
                self._free.append(segment)
            return None
        try:
            return OutputLease(self, segment, specs, index_ids)
        except (SharedMemoryError, ValueError, BufferError) as exc:
            logger.debug("cannot lend output segment %s: %s", segment.name, exc)
            self._discard(segment)
            return None

    def _acquire(self, nbytes: int) -> Optional[Segment]:
        segment = acquire_segment(self, nbytes, self._failed)
        if segment is not None:
            with self._lock:
                self._mapped.setdefault(segment, set())  # a new one: mapped by none
        return segment

    def _failed(self, exc: SharedMemoryError) -> None:
        logger.info("no output segments in shared memory, rows are copied: %s", exc)
        with self._lock:
            self.parts.clear()

    def _page_lock(self, segment: Segment) -> bool:
        """Registers ``segment`` with CUDA unless it is already; after one
        refusal the pool stops asking (batches are copied into pinned memory)."""
        with self._lock:
            if segment in self._locked:
                return True
        payload = segment.payload
        if not page_lock(payload):
            self._lock_failed = True
            return False
        with self._lock:
            self._locked[segment] = payload.data_ptr()
        return True

    def _spec(self, segment: Segment, part: int) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": segment.name, "token": segment.token.hex()}
        spec.update(segment.first_use())  # while its descriptor is open for servers to map
        with self._lock:
            drop = self._dropped.pop(part, None)
        if drop:
            spec["drop"] = drop
        return spec

    def _mapped_by(self, segment: Segment, part: int) -> None:
        with self._lock:
            mapped = self._mapped.get(segment)
            if mapped is not None:
                mapped.add(part)
                self._refusals.pop(part, None)

    def _refused(self, segment: Segment, part: int) -> None:
        with self._lock:
            if segment.announced and part not in self._mapped.get(segment, ()):
                return  # unlinked before this server first needed it: not its fault
            count = self._refusals[part] = self._refusals.get(part, 0) + 1
            if count >= 2 or not segment.announced:
                # Cannot map ours, or lost them twice in a row: copy its rows.
                self.parts.discard(part)
                logger.info("server %d does not take rows in place; its rows are copied",
                            part)

    def _returned(self, segment: Segment, spoiled: list[bool]) -> None:
        """The last view of a lease's outputs is gone."""
        with self._lock:
            if segment not in self._all:
                return
            if spoiled[0]:
                self._forget(segment)
            else:
                self._free.append(segment)

    def _discard(self, segment: Segment) -> None:
        with self._lock:
            if segment in self._all:
                self._forget(segment)

    def close(self) -> dict[int, list[list[str]]]:
        """Gives up every segment; returns, per server, the keys of those it
        may still map (for its ``release`` op). Outputs still held stay
        valid: the memory lives until their last view is gone."""
        with self._lock:
            idle = set(self._free)
            for segment in list(self._all):
                self._forget(segment, in_use=segment not in idle)
            self._free = []
            self._closed = True
            dropped, self._dropped = self._dropped, {}
        return dropped

    def _forget(self, segment: Segment, in_use: bool = False) -> None:
        """Gives ``segment`` up (under the lock); ``in_use``: views of it may
        still be alive, so it stays page-locked (see the module docstring)."""
        pointer = self._locked.pop(segment, None)
        if pointer is not None and not in_use:
            page_unlock(pointer)
        self._all.discard(segment)
        self._held -= segment.size
        for part in self._mapped.pop(segment, set()) | (set() if segment.announced
                                                         else set(self.parts)):
            self._dropped.setdefault(part, []).append(segment.key)
        segment.close()
