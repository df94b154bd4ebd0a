"""How the RPC loops keep one bad message from stopping them.

A server's I/O thread and workers, and a client's I/O thread, handle one
message at a time. Whatever one message makes the decoder or a handler raise
(a refusal, a bug, a ``RecursionError``, a ``MemoryError``) must fail only
that message: it becomes an error reply or a logged drop, and the loop goes
on. Only :data:`FATAL` exceptions (the interpreter is being shut down) and a
broken socket end a loop, and the server then stops with a recorded failure
(``pyg-dist serve`` exits non-zero).

A hostile peer can send thousands of messages that each hit the same
unexpected failure; :class:`FailureLog` logs the first few with their
traceback and then only counts, so the log cannot be flooded.
"""

from __future__ import annotations

import logging
import threading
import time

from pyg_dist.rpc.wire_values import error_text

FATAL = (KeyboardInterrupt, SystemExit)
"""Exceptions a message loop never swallows."""


class FailureLog:
    """Logs unexpected per-message failures, with traceback, at most
    ``burst`` times per ``interval`` seconds; the rest are counted and the
    count is logged with the next one that gets through.

    Thread-safe: an I/O thread and workers share one.

    Args:
        logger: Where to log.
        interval: Length of one rate window in seconds.
        burst: Failures logged in full per window.
    """

    def __init__(self, logger: logging.Logger, interval: float = 10.0, burst: int = 5) -> None:
        self._logger = logger
        self._interval = interval
        self._burst = burst
        self._lock = threading.Lock()
        self._window_start = float("-inf")
        self._logged = 0
        self._suppressed = 0

    def __call__(self, what: str, exc: BaseException) -> None:
        """Logs (or counts) one failure.

        Args:
            what: What failed, e.g. ``"decoding a request on part-0"``.
            exc: The exception; only its type and bounded text are logged
                besides the traceback (see :func:`error_text`).
        """
        now = time.monotonic()
        with self._lock:
            if now - self._window_start >= self._interval:
                self._window_start, self._logged = now, 0
            if self._logged >= self._burst:
                self._suppressed += 1
                return
            self._logged += 1
            suppressed, self._suppressed = self._suppressed, 0
        more = f" ({suppressed} more such failures not logged)" if suppressed else ""
        self._logger.error("%s failed: %s: %s%s", what, type(exc).__name__,
                           error_text(exc, 500), more, exc_info=exc)
