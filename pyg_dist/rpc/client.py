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
:class:`~pyg_dist.errors.ServerUnavailableError` (see
:mod:`pyg_dist.rpc.calls`). A reply or event the I/O thread cannot handle
is logged and dropped; it never stops the thread. Replies into lent shared
memory: :mod:`pyg_dist.rpc.shm.lender`.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent import futures
from typing import Any, Literal, Optional

import zmq
from torch import Tensor

from pyg_dist.errors import ProtocolError, RpcError, RpcTimeoutError, TransportError
from pyg_dist.rpc import protocol
from pyg_dist.rpc.calls import Call, IoState, fail, wait_result
from pyg_dist.rpc.config import RpcConfig, default_config
from pyg_dist.rpc.endpoints import normalize_endpoint
from pyg_dist.rpc.liveness import PeerStates, close_monitor
from pyg_dist.rpc.op_spec import OpSpec
from pyg_dist.rpc.protocol import MAX_TENSORS, Reply
from pyg_dist.rpc.reply_guard import ReplyGuard
from pyg_dist.rpc.shm.lender import RELEASE_WAIT_S, Lease, Lender
from pyg_dist.rpc.sockets import open_dealer
from pyg_dist.rpc.wire_values import describe

logger = logging.getLogger(__name__)

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
            :data:`~pyg_dist.rpc.protocol.MAX_TENSORS`.

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
            frames = protocol.encode_request(req_id, op, args, tensors,
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
        return wait_result(future, self._config, timeout, self._endpoints[server], op)

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
        if result.get("version") != protocol.PROTOCOL_VERSION:
            raise ProtocolError(f"server {self._endpoints[server]} speaks protocol "
                                f"{describe(result.get('version'))}, this client "
                                f"{protocol.PROTOCOL_VERSION}", address=self._endpoints[server])
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

