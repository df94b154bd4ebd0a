"""From a request's frames to its reply's frames, on the server.

:class:`Dispatch` is what an :class:`~pyg_dist.rpc.server.RpcServer` runs
for every request, inline on its I/O thread or in a worker: decode and
validate the frames (:func:`~pyg_dist.rpc.wire_format.decode_request`), hold a
declared op's request to its :class:`~pyg_dist.rpc.op_spec.OpSpec`, run the
handler (through the shared-memory service, which gives it its call
context), and encode the answer.

One bad message must not stop a server: whatever it makes the decoder or a
handler raise (a refusal, a bug, a ``RecursionError``, a ``MemoryError``)
becomes an error reply carrying its type name and message, and the loop
goes on. Only :data:`FATAL` exceptions (the interpreter is being shut down)
get through. A hostile peer can send thousands of messages that each hit
the same unexpected failure; :class:`FailureLog` logs the first few with
their traceback and then only counts, so the log cannot be flooded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import Tensor

from pyg_dist.errors import ProtocolError, PygDistError, wire_type
from pyg_dist.rpc import wire_format
from pyg_dist.rpc.admission import Admission
from pyg_dist.rpc.op_spec import OpSpec
from pyg_dist.rpc.shm.serving import SegmentService
from pyg_dist.rpc.wire_values import error_text

logger = logging.getLogger(__name__)

Handler = Callable[..., tuple[dict[str, Any], Sequence[Tensor]]]
"""``handler(args, tensors) -> (result, tensors)``, or ``handler(args,
tensors, ctx)`` when marked with :func:`~pyg_dist.rpc.context.uses_context`."""

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


# Errors a handler raises on purpose to refuse bad input: logged quietly.
_EXPECTED = (PygDistError, ValueError, TypeError, KeyError, IndexError)


class Dispatch:
    """A server's table of handlers, with the checks around every call.

    Besides the given handlers it answers ``ping`` (protocol version, name,
    host, ops; with ``{"usage": true}`` also ``usage``, what the server's
    byte budgets see) and ``release`` (segments a client lent, handed back).

    Args:
        handlers: Operation name -> :data:`Handler`.
        ops: Declarations of the ops whose requests are checked.
        shm: The server's shared-memory service (call contexts, ``release``).
        name: The server's name (``ping``, logs).
        max_message_bytes: Largest request accepted, all frames together.
        usage: What ``ping`` reports as ``usage`` when asked (the server's
            :meth:`~pyg_dist.rpc.server.RpcServer.budget_usage`).
    """

    def __init__(self, handlers: Mapping[str, Handler], ops: Mapping[str, OpSpec],
                 shm: SegmentService, name: str, max_message_bytes: int,
                 usage: Callable[[], dict[str, int]] = dict) -> None:
        self._ops = ops
        self._shm = shm
        self._name = name
        self._max_message_bytes = max_message_bytes
        self._usage = usage
        # Per server: one flooded server must not silence another's log.
        self._failure_log = FailureLog(logger)
        self._handlers: dict[str, Handler] = {"ping": self._ping, "release": shm.release,
                                              **handlers}

    def handle(self, frames: Sequence[Any]) -> list[Any]:
        """Decodes, validates and serves one request; returns reply frames.
        Never raises (but :data:`FATAL`)."""
        decoded = self.decode(frames)
        return self.serve(decoded) if isinstance(decoded, wire_format.Request) else decoded

    def decode(self, frames: Sequence[Any]) -> wire_format.Request | list[Any]:
        """The validated request, or the error reply refusing it. Never
        raises (but :data:`FATAL`)."""
        try:
            request = wire_format.decode_request(frames, self._max_message_bytes)
            spec = self._ops.get(request.op)
            if spec is not None:
                spec.check_request(request.args, request.tensors)
            return request
        except ProtocolError as exc:
            logger.debug("malformed request refused: %s", exc)
            message = error_text(exc)
        except FATAL:
            raise
        except BaseException as exc:  # a decoder bug must fail only this request
            self._failure_log(f"{self._name}: decoding a request", exc)
            message = f"the server failed to decode this request ({type(exc).__name__})"
        return wire_format.encode_error(wire_format.peek_id(frames), "ProtocolError", message)

    def serve(self, request: wire_format.Request) -> list[Any]:
        """Runs a validated request's handler; returns the reply frames.
        Never raises (but :data:`FATAL`)."""
        handler = self._handlers.get(request.op)
        if handler is None:
            return wire_format.encode_error(
                request.id, "ProtocolError",
                f"unknown op {request.op!r}; this server serves {sorted(self._handlers)}")
        try:
            return self._shm.serve(handler, request)
        except _EXPECTED as exc:
            kind, message = wire_type(exc), error_text(exc)  # bounded, cannot raise
            logger.debug("op %r refused: %s: %s", request.op, kind, message)
        except FATAL:
            raise
        except BaseException as exc:  # a handler's bug fails only its request
            self._failure_log(f"{self._name}: op {request.op!r}", exc)
            kind, message = wire_type(exc), error_text(exc)
        return wire_format.encode_error(request.id, kind, message)

    def answer_queued(self, item: tuple[int, Any, Any, Any], admission: Admission
                      ) -> list[Any]:
        """A worker's reply to a queued request: ``[charge, identity, *frames]``.

        Args:
            item: ``(size, identity, frames, None)`` of a request still to be
                decoded, or ``(size, identity, request, estimate)`` of one the
                I/O thread decoded.
            admission: The server's budgets (charged, and told the request
                left the queue).
        """
        size, identity, body, estimate = item
        try:
            if estimate is None:
                body = self.decode(body)
                if isinstance(body, wire_format.Request):
                    estimate = admission.estimate(body)
            if isinstance(body, wire_format.Request):
                charge, frames = admission.answer(identity.bytes, body, estimate, self.serve)
            else:
                charge, frames = 0, body
        finally:
            admission.unqueued(size)
        return [charge.to_bytes(8, "little"), identity, *frames]

    def _ping(self, args: dict[str, Any], tensors: list[Tensor]
              ) -> tuple[dict[str, Any], list[Tensor]]:
        info: dict[str, Any] = {"version": wire_format.PROTOCOL_VERSION, "name": self._name,
                                "host": self._shm.host, "ops": sorted(self._handlers)}
        if args.get("usage") is True:  # only when asked: it walks every connection
            info["usage"] = self._usage()
        return info, []
