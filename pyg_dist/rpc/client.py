"""A thread-safe ZeroMQ RPC client: many calls in flight, one I/O thread.

ZeroMQ sockets are not thread-safe, so every use of the client's sockets
(one DEALER per server endpoint) and of its call bookkeeping happens under
one I/O lock. A caller encodes its request in its own thread and, when the
lock is free, sends it right there: no hand-off to another thread, which on
a small call costs more than the bare round trip itself. When the lock is
busy the call goes to a command deque and the I/O thread, woken over a
socket pair, sends it. The I/O thread waits for replies on the sockets'
file descriptors without holding the lock, matches replies to calls by
request id, and fails calls whose deadline passed with
:class:`~pyg_dist.errors.RpcTimeoutError`. Every future completes, with a
result or an exception, also when the client is closed or the I/O thread
dies.

A ZeroMQ socket's file descriptor only signals changes: an operation on the
socket may take in the notice of a reply that arrived. So whoever sends on
a socket then reads every reply waiting there before it lets go of the
lock; the descriptor then signals the next one.

A dead, frozen or unreachable server is noticed by its lost connection
(:mod:`pyg_dist.rpc.liveness`: connection events and ZMTP heartbeats, read
by the I/O thread from one monitor socket per server that no other thread
touches), not at the deadline: its calls fail with
:class:`~pyg_dist.errors.ServerUnavailableError`: calls sent to it and
awaiting a reply fail at once (whether to send one again is
:mod:`pyg_dist.rpc.retrying`'s to decide). Calls issued while it is down are
queued by libzmq and go out when it reconnects; if it has not come back
within ``reconnect_grace`` they fail the same way (the client passes an
infinite grace when retries are configured: the deadline decides then).
Either way a call never waits past its own deadline. The call bookkeeping
(:class:`IoState`: calls awaiting a reply, their deadlines in a heap, calls
libzmq refused for now) is used only under the I/O lock. A reply or event
the I/O thread cannot handle is logged and dropped (its call then fails at
its deadline); it never stops the thread. Replies into lent shared memory:
:mod:`pyg_dist.rpc.shm.lender`.

Server addresses are checked before any socket exists
(:func:`normalize_endpoint`): ``tcp://host:port`` (``host`` a name, an IPv4
address or a bracketed IPv6 one), ``host:port`` (read as TCP) or
``ipc://path``; anything else is a typed error naming it, instead of a
failure of libzmq inside the I/O thread.
"""

from __future__ import annotations

import atexit
import collections
import heapq
import itertools
import logging
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Literal, Optional

import zmq
from torch import Tensor

from pyg_dist.errors import (
    ProtocolError,
    RpcError,
    RpcTimeoutError,
    ServerUnavailableError,
    TransportError,
    remote_error,
)
from pyg_dist.rpc import wire_format
from pyg_dist.rpc.config import RpcConfig, default_config
from pyg_dist.rpc.liveness import DOWN, PeerStates, close_monitor
from pyg_dist.rpc.op_spec import OpSpec
from pyg_dist.rpc.reply_guard import ReplyGuard
from pyg_dist.rpc.shm.lender import RELEASE_WAIT_S, Lease, Lender
from pyg_dist.rpc.sockets import open_dealer, recv_frames, send_frames
from pyg_dist.rpc.wire_format import MAX_TENSORS, ErrorReply, Reply
from pyg_dist.rpc.wire_values import describe, error_text

logger = logging.getLogger(__name__)

# Extra time ``RpcClient.call`` waits beyond a deadline for the I/O thread itself.
_GRACE = 5.0

# Clients still open when the interpreter exits are closed first: their I/O
# threads are daemons, and one still inside torch while exit() runs torch's
# static destructors aborted a trainer ("terminate called without an active
# exception") after a clean epoch.
_OPEN: weakref.WeakSet[RpcClient] = weakref.WeakSet()


@atexit.register
def _close_open_clients(clients: Optional[Sequence[RpcClient]] = None) -> None:
    """Closes this process's open clients (``clients``; ``None``: all), not
    a forked child's copies (their threads did not survive the fork),
    sending hand-backs of lent memory without waiting for answers."""
    for client in list(_OPEN) if clients is None else clients:
        if client._pid == os.getpid():
            try:
                client.close(release_wait=0.0)
            except Exception:  # exiting anyway: one client must not stop the others
                logger.debug("closing an RPC client at exit failed", exc_info=True)


class RpcClient:
    """Calls operations on one or more :class:`RpcServer` endpoints.

    Thread-safe: any number of threads may call concurrently; at most
    ``config.max_in_flight`` calls are outstanding at once (further callers
    wait for a slot, within their deadline). Tensors passed to a call must not
    be modified until its future completes: they are sent without a copy.
    A future's done-callbacks run on whichever thread read the reply, with
    the client's I/O lock held: they may start other calls but must not wait
    for one.

    Args:
        endpoints: The servers' addresses, ``tcp://host:port``, ``host:port``
            (read as TCP) or ``ipc://path``; calls name a server by its index
            in this list.
        config: Deadlines and limits; :func:`default_config` by default.
        ops: Op declarations whose reply tensor bounds apply
            (:meth:`~pyg_dist.rpc.op_spec.OpSpec.reply_tensor_limit`; a
            partition server's are :data:`pyg_dist.protocol.ops.OPS`); a
            reply to any other op carries at most
            :data:`~pyg_dist.rpc.wire_format.MAX_TENSORS`.

    Raises:
        RpcError: if ``endpoints`` is empty or an address does not parse
            (before any socket or thread exists).
    """

    def __init__(self, endpoints: Sequence[str], config: Optional[RpcConfig] = None,
                 ops: Optional[Mapping[str, OpSpec]] = None) -> None:
        if isinstance(endpoints, str) or not endpoints:
            raise RpcError("endpoints must be a non-empty list of server addresses like "
                           "tcp://host:port")
        self._endpoints = tuple(normalize_endpoint(e) for e in endpoints)
        self._config = config or default_config()
        self._ops = ops or {}
        self._ctx = zmq.Context()
        self._commands: collections.deque[Call] = collections.deque()
        self._lock = threading.Lock()  # the command deque and the closed flag
        # The sockets and the call bookkeeping; taken without waiting by
        # callers (a busy lock sends the call through the deque instead),
        # so done-callbacks that run under it may call again.
        self._io_lock = threading.Lock()
        self._sockets: list[zmq.Socket] = []  # open while the I/O thread runs
        # A deployment that asked for retries wants to ride out a restart
        # (retries x timeout): there a call to a lost server keeps its deadline.
        grace = self._config.reconnect_grace if not self._config.retries else float("inf")
        guards = [ReplyGuard(self._config.reply_receive_limit, self._config.curve_client)
                  for _ in self._endpoints]
        self._state = IoState(PeerStates(len(self._endpoints)), grace, guards)
        self._io_wakes_at = 0.0  # when the I/O thread next wakes by itself
        self._wake_pending = False
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._slots = threading.BoundedSemaphore(self._config.max_in_flight)
        self._ids = itertools.count(1)
        self._lender = Lender(self._endpoints, self._config.shared_memory_bytes)
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._io_main, name="pyg-dist-rpc-client",
                                        daemon=True)
        self._thread.start()
        self._pid = os.getpid()
        _OPEN.add(self)
        self._started.wait(self._config.connect_timeout)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The server endpoints (normalised), in the order calls index them."""
        return self._endpoints

    @property
    def config(self) -> RpcConfig:
        """The client's configuration."""
        return self._config

    # Calls ###################################################################

    def call_async(self, server: int, op: str, args: Optional[dict[str, Any]] = None,
                   tensors: Sequence[Tensor] = (), timeout: Optional[float] = None, *,
                   reply_bytes: Optional[int] = None) -> futures.Future:
        """Sends a request once and returns a future of its :class:`Reply`.

        One attempt, one deadline: re-sending, failover and back-off are
        :class:`~pyg_dist.rpc.retrying.RetryingClient`'s.

        The future fails with :class:`RemoteError` (the server's error
        message intact), :class:`RpcTimeoutError` (no reply within the
        deadline; names the address and op),
        :class:`~pyg_dist.errors.ServerUnavailableError` (the connection to
        the server was lost while the call awaited its reply, or did not
        come back within ``config.reconnect_grace``; names the address and
        op) or another :class:`RpcError`.

        Args:
            server: Index of the server in :attr:`endpoints`.
            op: Operation name.
            args: msgpack-native arguments.
            tensors: Tensors sent as raw frames (not copied: do not modify
                them until the future completes).
            timeout: Deadline in seconds; ``config.timeout`` by default.
            reply_bytes: Bytes the reply's tensors take (a handler that
                allocates them from its call context): a server on this host
                writes them into memory lent for it; they are views, valid
                until :meth:`Reply.release`.

        Raises:
            RpcError: if the client is closed, ``server`` is out of range or
                the arguments cannot be encoded.
            RpcTimeoutError: if no in-flight slot frees up within the deadline.
        """
        if reply_bytes is not None and 0 <= server < len(self._endpoints):
            lease = self._lender.lease(server, reply_bytes, lambda i: self._send(
                i, "ping", None, (), self._config.connect_timeout))
            if lease is not None:
                return self._lender.call(self._send, server, op, args, tensors, timeout,
                                         lease)
        return self._send(server, op, args, tensors, timeout)

    def _send(self, server: int, op: str, args: Optional[dict[str, Any]],
              tensors: Sequence[Tensor], timeout: Optional[float],
              lease: Optional[Lease] = None) -> futures.Future:
        if not 0 <= server < len(self._endpoints):
            raise RpcError(f"server index {server} is out of range; this client "
                           f"knows {len(self._endpoints)} servers", op=op)
        timeout = self._config.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + timeout
        address = self._endpoints[server]
        if not self._slots.acquire(timeout=max(timeout, 0.0)):
            raise RpcTimeoutError(
                f"call {op!r} to {address} found no free slot within {timeout:.3g}s: "
                f"{self._config.max_in_flight} calls already in flight (raise "
                f"RpcConfig.max_in_flight or wait for replies)", address=address, op=op)
        try:
            req_id = next(self._ids)
            frames = wire_format.encode_request(req_id, op, args, tensors,
                                                None if lease is None else lease.spec())
        except BaseException:
            self._slots.release()
            raise
        future: futures.Future = futures.Future()
        future.set_running_or_notify_cancel()  # calls cannot be cancelled
        spec = self._ops.get(op)
        call = Call(server, req_id, op, frames, future, deadline, timeout, lent=lease is not None,
                    max_tensors=MAX_TENSORS if spec is None else spec.reply_tensor_limit(args))
        outcome = self._send_now(call)
        wake = outcome == "wake"
        if outcome == "busy":
            with self._lock:
                if self._closed:
                    outcome = "closed"
                else:
                    self._commands.append(call)
                    wake, self._wake_pending = not self._wake_pending, True
        if outcome == "closed":
            self._slots.release()
            raise RpcError(f"cannot call {op!r}: the client is closed", address=address, op=op)
        # Runs at once if the future already completed.
        future.add_done_callback(lambda _: self._slots.release())
        if wake:
            self._wake()
        return future

    def _send_now(self, call: Call) -> Literal["sent", "wake", "busy", "closed"]:
        """Sends ``call`` from the caller's thread if the I/O lock is free.

        Returns ``"sent"``; ``"wake"`` when sent (or left to libzmq's backlog)
        but the I/O thread must look at it before it would wake by itself;
        ``"busy"`` (lock taken or no sockets yet: the caller queues); ``"closed"``.
        """
        if not self._io_lock.acquire(blocking=False):
            return "busy"
        try:
            if self._closed:
                return "closed"
            if not self._sockets:
                return "busy"
            state, sock = self._state, self._sockets[call.server]
            state.add(call)
            sent = state.send(sock, call)
            state.drain_replies(call.server, sock, self._endpoints[call.server])
            due = min(call.deadline, call.unavailable_at)
            return "sent" if sent and due >= self._io_wakes_at else "wake"
        finally:
            self._io_lock.release()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except BlockingIOError:  # a wake-up is already queued
            pass

    def call(self, server: int, op: str, args: Optional[dict[str, Any]] = None,
             tensors: Sequence[Tensor] = (), timeout: Optional[float] = None) -> Reply:
        """Calls ``op`` on ``server`` once and waits for its :class:`Reply`.

        Args:
            server: Index of the server in :attr:`endpoints`.
            op: Operation name.
            args: msgpack-native arguments.
            tensors: Tensors sent as raw frames.
            timeout: Deadline in seconds.

        Raises:
            RemoteError, RpcTimeoutError, RpcError: see :meth:`call_async`.
        """
        future = self.call_async(server, op, args, tensors, timeout)
        wait = (self._config.timeout if timeout is None else timeout) + _GRACE
        try:
            return future.result(wait)
        except RpcError:  # RpcTimeoutError is a TimeoutError too: keep it as is
            raise
        except futures.TimeoutError as exc:  # the I/O thread itself is stuck
            address = self._endpoints[server]
            raise RpcTimeoutError(f"no reply from {address} to {op!r} within {wait:.3g}s "
                                  f"(client I/O thread unresponsive)",
                                  address=address, op=op) from exc

    def ping(self, server: int, timeout: Optional[float] = None) -> dict[str, Any]:
        """Asks a server for its protocol version, name, host and ops.

        Args:
            server: Index of the server in :attr:`endpoints`.
            timeout: Deadline; ``config.connect_timeout`` by default.

        Raises:
            ProtocolError: if the server speaks another protocol version.
        """
        timeout = self._config.connect_timeout if timeout is None else timeout
        result = self.call(server, "ping", timeout=timeout).result
        self._lender.learn(server, result.get("host"))  # may lend it memory now
        if result.get("version") != wire_format.PROTOCOL_VERSION:
            raise ProtocolError(f"server {self._endpoints[server]} speaks protocol "
                                f"{describe(result.get('version'))}, this client "
                                f"{wire_format.PROTOCOL_VERSION}", address=self._endpoints[server])
        return result

    def close(self, release_wait: float = RELEASE_WAIT_S) -> None:
        """Hands back lent memory, fails outstanding calls, stops the I/O
        thread, closes sockets.

        Args:
            release_wait: Seconds to wait, for all servers together, for
                their answers to the hand-back of lent memory; 0 sends it
                without waiting (a stopping server whose peers stop too).
        """
        self._lender.close(self.call_async, release_wait)
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake()
        self._thread.join(self._config.connect_timeout)
        if self._thread.is_alive():
            logger.warning("RPC client I/O thread did not stop in time")
            return
        self._wake_r.close()
        self._wake_w.close()
        self._ctx.term()

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # I/O thread ##############################################################

    def _io_main(self) -> None:
        state = self._state
        failure: Optional[BaseException] = None
        monitors: list[zmq.Socket] = []
        try:
            with self._io_lock:
                for endpoint in self._endpoints:
                    sock, monitor = open_dealer(self._ctx, endpoint, self._config,
                                                state.peers)
                    self._sockets.append(sock)
                    monitors.append(monitor)
                fds = [sock.getsockopt(zmq.FD) for sock in self._sockets]
            self._started.set()
            self._io_loop(fds, monitors, state)
        except BaseException as exc:
            logger.exception("RPC client I/O thread failed")
            failure = exc
        finally:
            self._started.set()
            with self._lock:
                self._closed = True
                queued = list(self._commands)
                self._commands.clear()
            with self._io_lock:  # no caller sends any more: the client is closed
                sockets, self._sockets = self._sockets, []
                pending = list(state.pending.values())
                state.pending.clear()
            reason = "client is closed" if failure is None else f"client I/O failed: {failure}"
            for call in itertools.chain(queued, pending):
                fail(call.future, TransportError(
                    f"call {call.op!r} to {self._endpoints[call.server]} aborted: {reason}",
                    address=self._endpoints[call.server], op=call.op))
            state.close_guards()
            for sock, monitor in zip(sockets, monitors):
                close_monitor(sock, monitor)
            for sock in sockets:
                sock.close()

    def _io_loop(self, fds: list[int], monitors: list[zmq.Socket], state: IoState) -> None:
        # The sockets' descriptors, not the sockets: polling a socket itself
        # would use it, and callers may be sending on it meanwhile. The
        # monitor sockets are this thread's alone: polled as sockets.
        poller = zmq.Poller()
        for fd in fds:
            poller.register(fd, zmq.POLLIN)
        for monitor in monitors:
            poller.register(monitor, zmq.POLLIN)
        wake = self._wake_r.fileno()
        poller.register(wake, zmq.POLLIN)
        sockets = self._sockets
        with self._io_lock:
            timeout = state.poll_ms()
            self._io_wakes_at = time.monotonic() + timeout / 1000
        while True:
            events = dict(poller.poll(timeout))
            with self._io_lock:
                if wake in events and self._drain_commands(sockets, state):
                    return
                state.send_due(sockets)
                # After the sends, and every socket, not only those that
                # signalled: cheap (one look at its events each), and no
                # reply can wait unnoticed.
                for index, sock in enumerate(sockets):
                    state.drain_replies(index, sock, self._endpoints[index])
                for index, monitor in enumerate(monitors):
                    if monitor in events:
                        state.read_events(index, monitor, sockets[index],
                                          self._endpoints[index])
                state.guard_receives(self._endpoints)
                state.expire(self._endpoints)
                timeout = state.poll_ms()
                self._io_wakes_at = time.monotonic() + timeout / 1000

    def _drain_commands(self, sockets: list[zmq.Socket], state: IoState) -> bool:
        """Sends queued calls; returns whether the client is closing."""
        try:
            # Wake-ups are coalesced (one byte per batch of commands); a
            # byte left over only makes the next poll return at once.
            self._wake_r.recv(4096)
        except BlockingIOError:
            pass
        with self._lock:
            self._wake_pending = False
            calls = list(self._commands)
            self._commands.clear()
            closing = self._closed
        for call in calls:
            state.add(call)
            state.send(sockets[call.server], call)
        return closing


# Addresses #################################################################

# A DNS name or IPv4 address, or a bracketed IPv6 address (with an optional
# %zone), then a port.
_TCP = re.compile(r"(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?\])"
                  r":(?P<port>[0-9]{1,5})")
# Long enough for any real address; a longer one is shown cut.
_SHOWN = 200


def normalize_endpoint(address: object) -> str:
    """Returns ``address`` as a ZeroMQ endpoint a client can connect to.

    Args:
        address: ``tcp://host:port``, ``host:port`` (becomes
            ``tcp://host:port``) or ``ipc://path``; surrounding blanks are
            ignored.

    Returns:
        The endpoint, e.g. ``tcp://10.0.0.5:5555``.

    Raises:
        RpcError: if ``address`` is not a string or not one of the forms
            above, or its port is not in ``[1, 65535]``.
    """
    if not isinstance(address, str):
        raise RpcError(f"a server address must be a string like tcp://host:port, got a "
                       f"{type(address).__name__}")
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme == "ipc" and rest:
        return f"ipc://{rest}"
    match = _TCP.fullmatch(rest) if scheme == "tcp" else None
    if match is None:
        raise RpcError(f"cannot connect to server address {_show(text)}: expected "
                       f"tcp://host:port, host:port or ipc://path")
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise RpcError(f"server address {_show(text)} has port {port}; a server listens "
                       f"on a port in [1, 65535]")
    return f"tcp://{rest}"


def _show(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


# Call bookkeeping ##########################################################

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
    max_tensors: int = wire_format.MAX_TENSORS


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
        if call.max_tensors > wire_format.MAX_TENSORS:
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
            return wire_format.MAX_TENSORS
        call = self.pending.get(wire_format.peek_id(frames))
        if call is None:
            return wire_format.MAX_TENSORS
        if call.max_tensors > wire_format.MAX_TENSORS:
            self._big_replies -= 1  # answered now (or refused as malformed)
        return call.max_tensors

    def _complete(self, frames: list[zmq.Frame], address: str) -> None:
        try:
            req_id, content = wire_format.decode_reply(frames, self._reply_limit(frames))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # hostile or broken: fails its own call at most
            text = error_text(exc, 500) if isinstance(exc, ProtocolError) \
                else f"{type(exc).__name__}: {error_text(exc, 500)}"
            call = self.pending.pop(wire_format.peek_id(frames), None)
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

