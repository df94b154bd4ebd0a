"""The client's side of shared memory: segments lent to each server.

See :mod:`pyg_dist.rpc.shm` for the whole scheme.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

from pyg_dist.errors import SharedMemoryError
from pyg_dist.rpc.shm.files import _GRANULE, _HEADROOM, MIN_BYTES, Segment, room_for

logger = logging.getLogger(__name__)


def reuse_or_reserve(pool: Any, nbytes: int) -> tuple[Optional[Segment], int]:
    """A pool's choice for ``nbytes``, under the pool's lock: ``(segment, 0)``
    for the smallest idle segment that fits (taken out of ``pool._free``),
    ``(None, size)`` when a new segment of ``size`` bytes is to be made (it
    is counted in ``pool._held`` already), ``(None, 0)`` when there is no
    room (the pool's ``limit_bytes``, or the machine's memory).

    Shared by the reply segments (:class:`SegmentPool`) and the batch
    outputs (:class:`~pyg_dist.rpc.shm.outputs.OutputPool`): both keep
    ``_free``, ``_held``, ``limit_bytes`` and ``_forget``.
    """
    fits = [s for s in pool._free if s.size >= nbytes]
    if fits:
        segment = min(fits, key=lambda s: s.size)
        pool._free.remove(segment)
        return segment, 0
    size = -(-int(nbytes * _HEADROOM) // _GRANULE) * _GRANULE
    # Make room by giving up idle segments too small to serve.
    while pool._held + size > pool.limit_bytes and pool._free:
        pool._forget(pool._free.pop(0))
    if pool._held + size > pool.limit_bytes or not room_for(size):
        return None, 0
    pool._held += size
    return None, size


def acquire_segment(pool: Any, nbytes: int,
                    failed: Callable[[SharedMemoryError], None]) -> Optional[Segment]:
    """A segment of at least ``nbytes`` from ``pool``: an idle one, or a new
    one it has room for (:func:`reuse_or_reserve`), counted in its ``_all``.
    ``None`` when there is no room, when the pool was closed while the
    segment was made, or when shared memory failed (``failed`` is told; the
    reservation is given back first). Shared by both pools, as
    :func:`reuse_or_reserve` is; they also keep ``_lock`` and ``_closed``.
    """
    with pool._lock:
        segment, size = reuse_or_reserve(pool, nbytes)
    if segment is not None or not size:
        return segment
    try:
        segment = Segment(size)
    except SharedMemoryError as exc:
        with pool._lock:
            pool._held -= size
        failed(exc)
        return None
    with pool._lock:
        if not pool._closed:
            pool._all.add(segment)
            return segment
        pool._held -= size  # close() ran while it was made
    segment.close()
    return None


class SegmentPool:
    """A client's segments for one server (thread-safe).

    Args:
        limit_bytes: Most payload bytes of segments held at once; ``0``
            never lends any.
        address: The server, for messages.
    """

    def __init__(self, limit_bytes: int, address: str = "") -> None:
        self.limit_bytes = int(limit_bytes)
        self.address = address
        self.disabled: Optional[str] = None if limit_bytes > 0 else "disabled by configuration"
        self._lock = threading.Lock()
        self._free: list[Segment] = []
        self._all: set[Segment] = set()  # free and in use
        self._closed = False
        self._held = 0
        self._dropped: list[list[str]] = []  # keys of segments the server should unmap

    @property
    def held_bytes(self) -> int:
        """Payload bytes of the segments that exist now."""
        return self._held

    def acquire(self, nbytes: int) -> Optional[Segment]:
        """A segment of at least ``nbytes`` for one request, or ``None`` (use
        TCP): too small a reply, over the limit, a new segment would take
        more than a quarter of the memory available, or shared
        memory failed."""
        if nbytes < MIN_BYTES or self.disabled is not None:
            return None
        return acquire_segment(self, nbytes, lambda exc: self.disable(str(exc)))

    def release(self, segment: Segment) -> None:
        """Returns a segment whose request completed, for reuse."""
        with self._lock:
            if segment in self._all:  # not closed meanwhile
                self._free.append(segment)

    def discard(self, segment: Segment) -> None:
        """Gives up a segment whose request failed: the server may still
        write into it, so it is never reused."""
        with self._lock:
            if segment in self._all:
                self._forget(segment)

    def discard_idle(self) -> None:
        """Gives up every idle segment: the server lost one (it restarted),
        so it has probably lost the others too."""
        with self._lock:
            for segment in self._free:
                self._forget(segment)
            self._free = []

    def take_dropped(self) -> list[list[str]]:
        """Keys of segments given up since the last call, for the server to
        unmap (sent along with the next request)."""
        with self._lock:
            dropped, self._dropped = self._dropped, []
        return dropped

    def restore_dropped(self, keys: Sequence[Sequence[str]]) -> None:
        """Puts back keys taken for a request that failed: they still have
        to reach the server."""
        if keys:
            with self._lock:
                self._dropped.extend(list(k) for k in keys)

    def disable(self, reason: str) -> None:
        """Stops lending segments to this server (logged once)."""
        if self.disabled is None:
            self.disabled = reason
            logger.info("shared memory with %s off, replies travel over the socket: %s",
                        self.address, reason)

    def close(self) -> list[list[str]]:
        """Lets go of every segment and lends no more; returns the keys of
        those the server may still map (for a ``release`` call)."""
        with self._lock:
            for segment in list(self._all):
                self._forget(segment)
            self._free = []
            dropped, self._dropped = self._dropped, []
            self._closed = True
            self.disabled = self.disabled or "closed"
        return dropped

    def _forget(self, segment: Segment) -> None:
        self._all.discard(segment)
        self._held -= segment.size
        # Also a segment never confirmed: the server may have mapped it
        # before its request failed (an unknown name costs it nothing).
        self._dropped.append(segment.key)
        segment.close()
