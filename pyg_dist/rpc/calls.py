"""Bookkeeping of an :class:`~pyg_dist.rpc.client.RpcClient`'s calls.

Used only under the client's I/O lock (it does no locking of its own): calls
sent and awaiting a reply, their deadlines in a heap, calls libzmq refused
for now, and the replies and connection events that complete them. A reply
or event that cannot be handled is logged and dropped (its call then fails
at its deadline): it must never stop the thread reading it.

A server's lost connection (:mod:`pyg_dist.rpc.liveness`) ends the wait of
its calls early. Calls sent to it and awaiting a reply fail at once with
:class:`~pyg_dist.errors.ServerUnavailableError` (whether to send one again
is :mod:`pyg_dist.rpc.retrying`'s to decide). Calls issued while it is down are
queued by libzmq and go out when it reconnects; if it has not come back
within ``reconnect_grace`` they fail the same way (the client passes an
infinite grace when retries are configured: the deadline decides then).
Either way a call never waits past its own deadline.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Optional

import zmq

from pyg_dist.errors import (
    ProtocolError,
    RpcError,
    RpcTimeoutError,
    ServerUnavailableError,
    remote_error,
)
from pyg_dist.rpc import protocol
from pyg_dist.rpc.liveness import DOWN, PeerStates
from pyg_dist.rpc.protocol import ErrorReply, Reply
from pyg_dist.rpc.reply_guard import ReplyGuard
from pyg_dist.rpc.sockets import recv_frames, send_frames
from pyg_dist.rpc.wire_values import error_text

logger = logging.getLogger(__name__)

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
    sent: bool = False
    # When the call gives up waiting for its lost server to come back.
    unavailable_at: float = float("inf")
    lent: bool = False  # it lent memory for its reply
    # Most tensors its reply may carry (OpSpec.reply_tensor_limit).
    max_tensors: int = protocol.MAX_TENSORS


class IoState:
    """Calls awaiting a reply, with their deadlines, and calls that could not
    be sent yet (under the client's I/O lock only).

    Args:
        peers: The connection state of every server.
        reconnect_grace: Seconds a call waits for a lost server to reconnect.
        guards: One :class:`ReplyGuard` per server, bounding what libzmq holds
            for its replies.
    """

    def __init__(self, peers: PeerStates, reconnect_grace: float,
                 guards: Sequence[ReplyGuard] = ()) -> None:
        self.peers = peers
        self.reconnect_grace = reconnect_grace
        self.guards = list(guards)
        self.pending: dict[Optional[int], Call] = {}
        self._deadlines: list[tuple[float, int]] = []
        # Calls libzmq refused for now (no connection: a failed handshake, a
        # full queue); re-tried every loop until they go or their deadline
        # passes, so a call never fails earlier than its deadline.
        self._backlog: list[Call] = []
        # Calls added whose reply may carry more than MAX_TENSORS: only
        # while there were any is a reply's id peeked at before decoding.
        self._big_replies = 0

    def add(self, call: Call) -> None:
        self.pending[call.req_id] = call
        if call.max_tensors > protocol.MAX_TENSORS:
            self._big_replies += 1
        heapq.heappush(self._deadlines, (call.deadline, call.req_id))
        if self.peers.is_down(call.server):
            self._wait_for_reconnect(call, time.monotonic())

    def _wait_for_reconnect(self, call: Call, now: float) -> None:
        if call.unavailable_at == float("inf") and call.deadline > now + self.reconnect_grace:
            call.unavailable_at = now + self.reconnect_grace
            heapq.heappush(self._deadlines, (call.unavailable_at, call.req_id))

    def read_events(self, server: int, monitor: zmq.Socket, sock: zmq.Socket,
                    address: str) -> None:
        """Takes in the connection events of ``server`` (socket ``sock`` at
        ``address``) waiting on its ``monitor`` socket."""
        guard = self.guards[server] if self.guards else None
        try:
            changes = self.peers.read(server, monitor, guard)
        except Exception:  # one bad event must not stop the I/O thread
            logger.exception("dropping unreadable connection events of %s", address)
            return
        for change in changes:
            if change != DOWN:
                logger.debug("connected to %s", address)
                continue
            # A connection that drops while nothing awaits it (a peer that
            # stopped with its cluster) concerns nobody yet.
            awaited = any(c.server == server and c.sent for c in self.pending.values())
            logger.log(logging.WARNING if awaited else logging.DEBUG,
                       "lost the connection to %s; failing the calls awaiting its replies",
                       address)
            # Replies that arrived before the connection ended answer their
            # calls; only the others lost their server.
            self.drain_replies(server, sock, address)
            self.lost(server, address)

    def drain_replies(self, server: int, sock: zmq.Socket, address: str) -> None:
        """Completes the calls of every reply waiting on ``sock`` (from
        server ``server`` at ``address``); once none is left the socket's
        descriptor signals the next."""
        # Asking for the socket's events re-arms its descriptor just as a
        # refused read would, at half the cost of the zmq.Again exception.
        guard = self.guards[server] if self.guards else None
        while True:
            frames = recv_frames(sock)
            if frames is None:
                return
            if guard is not None:
                guard.took(frames)
            try:
                self._complete(frames, address)
            except Exception:  # one bad reply must not stop the reading thread
                logger.exception("dropping a reply from %s that could not be handled",
                                 address)

    def _reply_limit(self, frames: list[zmq.Frame]) -> int:
        """Most tensors the reply in ``frames`` may carry: its call's limit."""
        if not self._big_replies:
            return protocol.MAX_TENSORS
        call = self.pending.get(protocol.peek_id(frames))
        if call is None:
            return protocol.MAX_TENSORS
        if call.max_tensors > protocol.MAX_TENSORS:
            self._big_replies -= 1  # answered now (or refused as malformed)
        return call.max_tensors

    def _complete(self, frames: list[zmq.Frame], address: str) -> None:
        try:
            req_id, content = protocol.decode_reply(frames, self._reply_limit(frames))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # hostile or broken: fails its own call at most
            text = error_text(exc, 500) if isinstance(exc, ProtocolError) \
                else f"{type(exc).__name__}: {error_text(exc, 500)}"
            call = self.pending.pop(protocol.peek_id(frames), None)
            if call is None:
                logger.warning("dropping malformed reply from %s: %s", address, text)
            else:
                fail(call.future, ProtocolError(
                    f"malformed reply from {address} to {call.op!r}: {text}",
                    address=address, op=call.op))
            return
        call = self.pending.pop(req_id, None)
        if call is None:
            logger.debug("late or unknown reply %s from %s", req_id, address)
        elif isinstance(content, ErrorReply):
            fail(call.future, remote_error(content.type, content.message, address=address,
                                           op=call.op))
        elif content.shm is not None and not call.lent:
            fail(call.future, ProtocolError(f"{address} answered {call.op!r} into shared "
                                            f"memory that was not lent", address=address,
                                            op=call.op))
        else:
            call.future.set_result(content)

    def guard_receives(self, endpoints: Sequence[str]) -> None:
        """Cuts the connection of every server for which libzmq holds more
        than the reply receive bound; the calls awaiting its replies fail
        with a :class:`ProtocolError` naming it."""
        now = time.monotonic()
        for server, guard in enumerate(self.guards):
            held = guard.check(now)
            if held is None:
                continue
            address = endpoints[server]
            logger.warning("cut the connection to %s: libzmq held %d bytes of its "
                           "unfinished or untaken replies, over this client's bound of %d",
                           address, held, guard.budget)
            for call in [c for c in self.pending.values() if c.server == server and c.sent]:
                del self.pending[call.req_id]
                fail(call.future, ProtocolError(
                    f"{address} sent more reply bytes than this client holds for one "
                    f"server ({held} > {guard.budget} bytes) while {call.op!r} awaited its "
                    f"reply; the connection was cut. A broken or hostile server, or one "
                    f"whose replies are bigger than this client accepts: raise "
                    f"PYG_DIST_REPLY_RECEIVE_BUDGET (RpcConfig.reply_receive_budget) to "
                    f"at least the server's max_reply_bytes",
                    address=address, op=call.op))

    def close_guards(self) -> None:
        """Closes the guards' duplicate descriptors (I/O thread, at the end)."""
        for guard in self.guards:
            guard.close()

    def lost(self, server: int, address: str) -> None:
        """Server ``server`` lost its connection: its calls awaiting a reply
        fail now, the others wait for a reconnect."""
        now = time.monotonic()
        for call in [c for c in self.pending.values() if c.server == server]:
            if not call.sent:
                self._wait_for_reconnect(call, now)
            else:
                del self.pending[call.req_id]
                fail(call.future, ServerUnavailableError(
                    f"lost the connection to {address} while {call.op!r} awaited its "
                    f"reply: the server closed it (its process ended?) or stopped "
                    f"answering heartbeats; is it running and reachable?",
                    address=address, op=call.op))

    def send(self, sock: zmq.Socket, call: Call) -> bool:
        try:
            send_frames(sock, call.frames)
        except zmq.Again:
            self._backlog.append(call)
            return False
        call.sent = True
        call.frames = []  # let the tensors go as soon as libzmq has them
        return True

    def send_due(self, sockets: list[zmq.Socket]) -> None:
        """Re-tries the sends libzmq refused for now."""
        if not self._backlog:
            return
        backlog, self._backlog = self._backlog, []
        for call in backlog:
            if call.req_id in self.pending:  # not expired meanwhile
                self.send(sockets[call.server], call)

    def poll_ms(self) -> int:
        now = time.monotonic()
        limit = BACKLOG_POLL_MS if self._backlog else MAX_POLL_MS
        for guard in self.guards:
            due = guard.timeout_ms(now)
            if due is not None:
                limit = min(limit, due)
        while self._deadlines and self._deadlines[0][1] not in self.pending:
            heapq.heappop(self._deadlines)
        if not self._deadlines:
            return limit
        left = self._deadlines[0][0] - now
        return max(0, min(limit, int(left * 1000) + 1))

    def expire(self, endpoints: Sequence[str]) -> None:
        """Fails the calls whose deadline or reconnect grace passed."""
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, req_id = heapq.heappop(self._deadlines)
            call = self.pending.get(req_id)
            if call is None:  # answered
                continue
            if call.deadline <= now:
                self._timed_out(call, endpoints[call.server], now)
            elif call.unavailable_at <= now:
                call.unavailable_at = float("inf")
                if self.peers.is_down(call.server):  # else it came back: wait on
                    self._unavailable(call, endpoints[call.server], now)

    def _timed_out(self, call: Call, address: str, now: float) -> None:
        del self.pending[call.req_id]
        unsent = "" if call.sent else " (it could not even be sent: no connection)"
        down = "" if not self.peers.is_down(call.server) else \
            " (its connection is lost and has not come back)"
        fail(call.future, RpcTimeoutError(
            f"no reply from {address} to {call.op!r} within {call.timeout:.3g}s"
            f"{unsent}{down}; is the server running and reachable, and do the CURVE "
            f"keys match?", address=address, op=call.op))

    def _unavailable(self, call: Call, address: str, now: float) -> None:
        del self.pending[call.req_id]
        since = now - (self.peers.down_since(call.server) or now)
        fail(call.future, ServerUnavailableError(
            f"{call.op!r} to {address} got no reply: the connection to the server was "
            f"lost {since:.3g}s ago and did not come back within "
            f"{self.reconnect_grace:.3g}s (RpcConfig.reconnect_grace); is the server "
            f"running and reachable?", address=address, op=call.op))


def fail(future: futures.Future, exc: BaseException) -> None:
    """Fails ``future`` unless it already completed."""
    if not future.done():
        future.set_exception(exc)


# Extra time ``RpcClient.call`` waits beyond a deadline for the I/O thread itself.
_GRACE = 5.0


def wait_result(future: futures.Future, config: Any, timeout: Optional[float],
                address: str, op: str) -> Reply:
    """The reply ``future`` holds, waited for as long as the call's
    deadline (``config``'s timeout or ``timeout``) and a grace."""
    wait = (config.timeout if timeout is None else timeout) + _GRACE
    try:
        return future.result(wait)
    except RpcError:  # RpcTimeoutError is a TimeoutError too: keep it as is
        raise
    except futures.TimeoutError as exc:  # the I/O thread itself is stuck
        raise RpcTimeoutError(f"no reply from {address} to {op!r} within {wait:.3g}s "
                              f"(client I/O thread unresponsive)",
                              address=address, op=op) from exc
