"""Bookkeeping of an :class:`~pyg_dist.rpc.client.RpcClient`'s calls.

Used only under the client's I/O lock (it does no locking of its own): calls
sent and awaiting a reply, their deadlines in a heap, and calls libzmq
refused for now.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Optional

import zmq

from pyg_dist.errors import RpcTimeoutError
from pyg_dist.rpc.sockets import send_frames

MAX_POLL_MS = 1000
BACKLOG_POLL_MS = 10


@dataclass(slots=True)
class Call:
    """One call: the server index, its id and op, its frames until sent, the
    future its caller holds, and its deadline (``time.monotonic()``)."""

    server: int
    req_id: int
    op: str
    frames: list[Any]
    future: futures.Future
    deadline: float
    timeout: float
    retries: int = 0  # re-sends left after a timeout (idempotent calls only)
    backoff: float = 0.0  # pause before the next re-send, doubled each time
    backoff_max: float = 0.0
    attempts: int = 1
    sent: bool = False


class IoState:
    """Calls awaiting a reply, with their deadlines, and calls that could not
    be sent yet (under the client's I/O lock only)."""

    def __init__(self) -> None:
        self.pending: dict[Optional[int], Call] = {}
        self._deadlines: list[tuple[float, int]] = []
        # Calls libzmq refused for now (no connection: a failed handshake, a
        # full queue); re-tried every loop until they go or their deadline
        # passes, so a call never fails earlier than its deadline.
        self._backlog: list[Call] = []
        # (time, req_id) of idempotent calls to send again after a timeout.
        self._resends: list[tuple[float, int]] = []

    def add(self, call: Call) -> None:
        self.pending[call.req_id] = call
        heapq.heappush(self._deadlines, (call.deadline, call.req_id))

    def send(self, sock: zmq.Socket, call: Call) -> bool:
        try:
            send_frames(sock, call.frames)
        except zmq.Again:
            self._backlog.append(call)
            return False
        call.sent = True
        if not call.retries:
            call.frames = []  # let the tensors go as soon as libzmq has them
        return True

    def send_due(self, sockets: list[zmq.Socket]) -> None:
        """Re-tries refused sends and sends the re-sends that are due."""
        if not self._backlog and not self._resends:
            return
        backlog, self._backlog = self._backlog, []
        now = time.monotonic()
        while self._resends and self._resends[0][0] <= now:
            call = self.pending.get(heapq.heappop(self._resends)[1])
            if call is not None:
                backlog.append(call)
        for call in backlog:
            if call.req_id in self.pending:  # not expired meanwhile
                self.send(sockets[call.server], call)

    def poll_ms(self) -> int:
        while self._deadlines and self._deadlines[0][1] not in self.pending:
            heapq.heappop(self._deadlines)
        if not self._deadlines:
            return MAX_POLL_MS
        soonest = self._deadlines[0][0]
        if self._resends:
            soonest = min(soonest, self._resends[0][0])
        left = soonest - time.monotonic()
        limit = BACKLOG_POLL_MS if self._backlog else MAX_POLL_MS
        return max(0, min(limit, int(left * 1000) + 1))

    def expire(self, endpoints: Sequence[str]) -> None:
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, req_id = heapq.heappop(self._deadlines)
            call = self.pending.get(req_id)
            if call is None or call.deadline > now:  # answered, or an old deadline
                continue
            if call.retries:
                # Idempotent: send it again after a pause, with a fresh
                # deadline; a late reply to any attempt completes the call.
                call.retries -= 1
                resend_at = now + call.backoff
                call.backoff = min(2 * call.backoff, call.backoff_max)
                call.deadline = resend_at + call.timeout
                heapq.heappush(self._resends, (resend_at, req_id))
                heapq.heappush(self._deadlines, (call.deadline, req_id))
                continue
            del self.pending[req_id]
            address = endpoints[call.server]
            unsent = "" if call.sent else " (it could not even be sent: no connection)"
            tries = f" in each of {call.attempts} attempts" if call.attempts > 1 else ""
            fail(call.future, RpcTimeoutError(
                f"no reply from {address} to {call.op!r} within {call.timeout:.3g}s{tries}"
                f"{unsent}; is the server running and reachable, and do the CURVE "
                f"keys match?", address=address, op=call.op))


def fail(future: futures.Future, exc: BaseException) -> None:
    """Fails ``future`` unless it already completed."""
    if not future.done():
        future.set_exception(exc)
