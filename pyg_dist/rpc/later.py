"""Runs a callback at given times, on one thread of its own.

The retry layer (:mod:`pyg_dist.rpc.retrying`) learns that a call failed in
a done-callback, which runs with the RPC client's I/O lock held: it must not
wait there (for a pause, or for an in-flight slot). :class:`Later` takes
the re-send and runs it at its time on its own thread instead.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Optional, TypeVar

from pyg_dist.errors import RpcError

T = TypeVar("T")


class Later(Generic[T]):
    """Runs ``run(item)`` at the times given to :meth:`at`, in time order, on
    one daemon thread (started on first use).

    Args:
        run: What to do with an item when its time comes.
        failed: Told ``(item, error)`` of an item that cannot run: handed
            in after :meth:`close`, or whose ``run`` raised.
    """

    def __init__(self, run: Callable[[T], None],
                 failed: Callable[[T, BaseException], None]) -> None:
        self._run = run
        self._failed = failed
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Any]] = []
        self._order = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def at(self, when: float, item: T) -> None:
        """Runs ``item`` at ``when`` (``time.monotonic()``), or at once if past."""
        with self._cond:
            if not self._closed:
                heapq.heappush(self._heap, (when, next(self._order), item))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._main, daemon=True,
                                                    name="pyg-dist-rpc-retries")
                    self._thread.start()
                self._cond.notify()
                return
        self._failed(item, RpcError("cannot send it again: the client is closed"))

    def close(self) -> list[T]:
        """Stops the thread; returns the items that were still due."""
        with self._cond:
            self._closed = True
            left = [item for _, _, item in self._heap]
            self._heap.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        return left

    def _main(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (
                        not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(None if not self._heap
                                    else self._heap[0][0] - time.monotonic())
                if self._closed:
                    return
                _, _, item = heapq.heappop(self._heap)
            try:
                self._run(item)
            except BaseException as exc:  # one item's failure must not stop the others
                self._failed(item, exc)
