"""Bookkeeping of an :class:`~pyg_dist.rpc.client.RpcClient`'s calls.

Used by the client's I/O thread only (no locking): calls sent and awaiting a
reply, their deadlines in a heap, and calls libzmq refused for now.
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

MAX_POLL_MS = 1000
BACKLOG_POLL_MS = 10


@dataclass
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


class IoState:
    """Calls awaiting a reply, with their deadlines, and calls that could not
    be sent yet (I/O thread only)."""

    def __init__(self) -> None:
        self.pending: dict[Optional[int], Call] = {}
        self._deadlines: list[tuple[float, int]] = []
        # Calls libzmq refused for now (no connection: a failed handshake, a
        # full queue); re-tried every loop until they go or their deadline
        # passes, so a call never fails earlier than its deadline.
        self._backlog: list[Call] = []

    def add(self, call: Call) -> None:
        self.pending[call.req_id] = call
        heapq.heappush(self._deadlines, (call.deadline, call.req_id))

    def send(self, sock: zmq.Socket, call: Call) -> bool:
        try:
            sock.send_multipart(call.frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self._backlog.append(call)
            return False
        call.frames = []  # let the tensors go as soon as libzmq has them
        return True

    def send_backlog(self, sockets: list[zmq.Socket]) -> None:
        backlog, self._backlog = self._backlog, []
        for call in backlog:
            if call.req_id in self.pending:  # not expired meanwhile
                self.send(sockets[call.server], call)

    def poll_ms(self) -> int:
        while self._deadlines and self._deadlines[0][1] not in self.pending:
            heapq.heappop(self._deadlines)
        if not self._deadlines:
            return MAX_POLL_MS
        left = self._deadlines[0][0] - time.monotonic()
        limit = BACKLOG_POLL_MS if self._backlog else MAX_POLL_MS
        return max(0, min(limit, int(left * 1000) + 1))

    def expire(self, endpoints: Sequence[str]) -> None:
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, req_id = heapq.heappop(self._deadlines)
            call = self.pending.pop(req_id, None)
            if call is not None:
                address = endpoints[call.server]
                unsent = " (it could not even be sent: no connection)" if call.frames else ""
                fail(call.future, RpcTimeoutError(
                    f"no reply from {address} to {call.op!r} within {call.timeout:.3g}s"
                    f"{unsent}; is the server running and reachable, and do the CURVE "
                    f"keys match?", address=address, op=call.op))


def fail(future: futures.Future, exc: BaseException) -> None:
    """Fails ``future`` unless it already completed."""
    if not future.done():
        future.set_exception(exc)
