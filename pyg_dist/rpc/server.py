"""A generic ZeroMQ RPC server: a ROUTER socket in front of worker threads.

Threads and sockets (ZeroMQ sockets are not thread-safe, so each has exactly
one owner)::

    clients ==tcp==> ROUTER --(I/O thread)--> work queue --> worker 1..N
                       ^      |                                   |
                       |      +-- small request: served inline    |
                       +--(I/O thread)-- PULL <==inproc== PUSH ---+

The I/O thread owns the ROUTER and the PULL socket. A request of at most
``RpcConfig.inline_bytes`` (all frames together) is decoded, validated and
served right there on the I/O thread: no queue, no worker wake-up, no inproc
hop, which is most of the cost of a small call. Every bigger request goes to a
bounded :class:`~pyg_dist.rpc.work_queue.WorkQueue`, which wakes the worker
that went idle last (its caches are the warm ones); when that queue is full
the I/O thread stops reading the ROUTER, so TCP pushes back instead of memory
growing. Workers
decode and validate a request (:func:`~pyg_dist.rpc.protocol.decode_request`)
before the handler sees it, run the handler (torch releases the GIL, so
workers run in parallel), and push the reply frames back over their own
``inproc`` PUSH socket; the I/O thread forwards them to the client. Any
exception becomes an error reply carrying its type name and message; the
server keeps serving everyone else.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Optional

import zmq
from torch import Tensor
from zmq.auth.thread import ThreadAuthenticator

from pyg_dist.errors import ProtocolError, PygDistError, TransportError
from pyg_dist.rpc import protocol
from pyg_dist.rpc.config import RpcConfig, default_config
from pyg_dist.rpc.liveness import set_heartbeats
from pyg_dist.rpc.sockets import NOBLOCK, send_frames
from pyg_dist.rpc.work_queue import WorkQueue

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], list[Tensor]], tuple[dict[str, Any], Sequence[Tensor]]]
"""``handler(args, tensors) -> (result, tensors)``."""

# Errors a handler raises on purpose to refuse bad input: logged quietly.
_EXPECTED = (PygDistError, ValueError, TypeError, KeyError, IndexError)
_STOP = b"stop"
_POLL_FULL_MS = 10
# Requests the I/O thread takes from the ROUTER in one go before it looks at
# workers' replies (and a stop request) again.
_BATCH = 64


class RpcServer:
    """Serves a table of operations over a ZeroMQ ROUTER socket.

    Besides the given handlers every server answers ``ping`` with the
    protocol version, its name and the operations it serves.

    Args:
        handlers: Operation name -> ``handler(args, tensors) -> (result,
            tensors)``. ``args``/``result`` are msgpack-native maps.
        bind: ZeroMQ endpoint to bind, e.g. ``tcp://127.0.0.1:0`` (port 0
            picks a free port; :attr:`endpoint` reports the real one).
        config: Limits and worker count; :func:`default_config` by default.
        name: Name reported by ``ping`` and used in logs.
        worker_ops: Operations always served by a worker, however small
            the request: ones whose cost does not follow the request's size
            (dumping a whole part's edges), which would otherwise hold up the
            I/O thread and every client behind it.
    """

    def __init__(self, handlers: Mapping[str, Handler], bind: str = "tcp://127.0.0.1:0",
                 config: Optional[RpcConfig] = None, name: str = "pyg-dist",
                 worker_ops: Collection[str] = ()) -> None:
        self._config = config or default_config()
        self._worker_ops = frozenset(worker_ops)
        self._handlers: dict[str, Handler] = {"ping": self._ping, **handlers}
        self._bind = bind
        self._name = name
        self._ctx: Optional[zmq.Context] = None
        self._inbox = WorkQueue(self._config.max_queued)
        self._threads: list[threading.Thread] = []
        self._ready = threading.Event()
        self._stopped = threading.Event()  # set by stop() or a failed I/O thread
        self._stop_lock = threading.Lock()
        self._closed = False  # stop() ran (threads joined, context released)
        self._endpoint: Optional[str] = None
        self._error: Optional[BaseException] = None
        self._replies_addr = f"inproc://pyg-dist-replies-{id(self):x}"
        self._auth: Optional[ThreadAuthenticator] = None

    # Public API ##############################################################

    @property
    def endpoint(self) -> str:
        """The endpoint the server is bound to (real port, not ``0``)."""
        if self._endpoint is None:
            raise TransportError("server is not started; call start() first")
        return self._endpoint

    @property
    def config(self) -> RpcConfig:
        """The server's configuration."""
        return self._config

    def start(self) -> str:
        """Binds the socket, starts the threads and returns the endpoint.

        Raises:
            TransportError: if the endpoint cannot be bound.
        """
        if self._threads:
            return self.endpoint
        self._ctx = zmq.Context()
        self._start_authenticator()
        io = threading.Thread(target=self._io_main, name=f"{self._name}-io", daemon=True)
        self._threads.append(io)
        io.start()
        if not self._ready.wait(self._config.connect_timeout) or self._error is not None:
            self.stop()
            raise TransportError(f"cannot serve on {self._bind}: {self._error}",
                                 address=self._bind) from self._error
        for i in range(self._config.workers):
            worker = threading.Thread(target=self._worker_main, name=f"{self._name}-worker-{i}",
                                      daemon=True)
            self._threads.append(worker)
            worker.start()
        logger.info("%s serving on %s with %d workers", self._name, self._endpoint,
                    self._config.workers)
        return self.endpoint

    def stop(self, timeout: float = 5.0) -> None:
        """Stops serving, joins the threads and closes every socket.

        Requests still queued are dropped (their clients time out). Safe to
        call more than once and from any thread.

        Args:
            timeout: How long to wait for each thread.
        """
        with self._stop_lock:
            if self._ctx is None or self._closed:
                return
            self._closed = True
        self._stopped.set()
        if self._ready.is_set() and self._error is None:
            poke = self._ctx.socket(zmq.PUSH)
            poke.linger = 0
            try:
                poke.connect(self._replies_addr)
                poke.send(_STOP)
            finally:
                poke.close()
        alive = []
        io = self._threads[0] if self._threads else None
        if io is not None:
            io.join(timeout)  # it no longer fills the inbox after this
            if io.is_alive():
                alive.append(io.name)
        # Drop what is still queued (nobody could send its reply any more)
        # and let every worker's next get() return None.
        self._inbox.close()
        for thread in self._threads[1:]:
            thread.join(timeout)
            if thread.is_alive():
                alive.append(thread.name)
        if self._auth is not None:
            self._auth.stop()
        if alive:
            # Terminating the context would block on their sockets.
            logger.warning("threads still running after stop: %s", ", ".join(alive))
            return
        self._ctx.term()
        logger.info("%s on %s stopped", self._name, self._endpoint)

    def _start_authenticator(self) -> None:
        """With CURVE and an authorised-keys directory, admits only those
        clients (ZAP handler in its own thread, on this server's context)."""
        directory = self._config.authorized_keys_dir
        if not self._config.curve_server or directory is None:
            return
        if not os.path.isdir(directory):
            raise TransportError(f"authorised CURVE keys directory {directory} does not "
                                 f"exist; create it and copy the clients' public .key "
                                 f"files into it", address=self._bind)
        self._auth = ThreadAuthenticator(self._ctx, log=logger)
        self._auth.start()
        self._auth.configure_curve(domain="*", location=directory)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the server is stopped; returns whether it is."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> RpcServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # I/O thread ##############################################################

    @property
    def _context(self) -> zmq.Context:
        if self._ctx is None:  # threads only run between start() and stop()
            raise TransportError("server context used before start()")
        return self._ctx

    def _open_router(self) -> zmq.Socket:
        router = self._context.socket(zmq.ROUTER)
        router.linger = 0
        # libzmq drops the connection of a peer sending a frame this large
        # before buffering it; anything between the two limits gets a clear
        # error reply from decode_request instead.
        router.setsockopt(zmq.MAXMSGSIZE, 2 * self._config.max_message_bytes)
        # Incoming: at most max_queued requests wait in libzmq per client
        # besides the inbox; beyond that libzmq stops reading that client's
        # TCP connection, so a busy server pushes back instead of buffering.
        # Outgoing: a bounded queue per client; ROUTER_MANDATORY makes a
        # full one visible (zmq.Again) instead of a silent drop, to log it.
        router.rcvhwm = self._config.max_queued
        router.sndhwm = self._config.reply_hwm
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # Drop the connection (and queued replies) of a client that froze or
        # became unreachable; libzmq answers clients' PINGs by itself.
        set_heartbeats(router, self._config)
        if self._config.curve_server:
            router.curve_server = True
            router.curve_secretkey = self._config.server_secret_key.encode()
            router.curve_publickey = (self._config.server_public_key or "").encode()
        try:
            router.bind(self._bind)
        except zmq.ZMQError:
            router.close()  # an open socket would block Context.term()
            raise
        return router

    def _io_main(self) -> None:
        router = replies = None
        try:
            router = self._open_router()
            replies = self._context.socket(zmq.PULL)
            replies.linger = 0
            replies.bind(self._replies_addr)
            self._endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError as exc:
            self._error = exc
            for sock in (router, replies):
                if sock is not None:
                    sock.close()
            self._ready.set()
            return
        self._ready.set()
        try:
            self._io_loop(router, replies)
        except Exception:
            logger.exception("I/O thread of %s failed; the server stops", self._name)
            self._stopped.set()
        finally:
            router.close()
            replies.close()

    def _io_loop(self, router: zmq.Socket, replies: zmq.Socket) -> None:
        both, only_replies = zmq.Poller(), zmq.Poller()
        both.register(router, zmq.POLLIN)
        both.register(replies, zmq.POLLIN)
        only_replies.register(replies, zmq.POLLIN)
        inline_bytes = self._config.inline_bytes if self._config.workers else -1
        inbox, stopped = self._inbox, self._stopped
        while True:
            full = inbox.full()
            events = dict((only_replies if full else both).poll(_POLL_FULL_MS if full else None))
            if replies in events and self._forward_replies(router, replies):
                return
            if router not in events:
                continue
            for _ in range(_BATCH):
                if inbox.full() or stopped.is_set():
                    break
                try:
                    msg = router.recv_multipart(NOBLOCK, copy=False)
                except zmq.Again:
                    break
                if inline_bytes >= 0 and sum(map(len, msg)) - len(msg[0]) > inline_bytes:
                    inbox.put_nowait(msg)  # only this thread puts: never full here
                    continue
                decoded = self._decode(msg[1:])  # inline: no hand-off
                if isinstance(decoded, protocol.Request) and inline_bytes >= 0 \
                        and decoded.op in self._worker_ops:
                    inbox.put_nowait((msg[0], decoded))  # slow however small: a worker
                    continue
                reply = self._serve(decoded) if isinstance(decoded, protocol.Request) \
                    else decoded
                if stopped.is_set():  # as a worker's reply: dropped
                    return
                self._send_reply(router, [msg[0], *reply])

    def _forward_replies(self, router: zmq.Socket, replies: zmq.Socket) -> bool:
        """Sends the workers' finished replies; returns whether to stop."""
        while True:
            try:
                msg = replies.recv_multipart(NOBLOCK, copy=False)
            except zmq.Again:
                return False
            if len(msg) == 1:  # the stop poke
                return True
            self._send_reply(router, msg)

    def _send_reply(self, router: zmq.Socket, msg: list[Any]) -> None:
        try:
            try:
                send_frames(router, msg)
            except zmq.Again:
                # libzmq learns that a client read its replies from commands
                # it processes only now and then; reading ZMQ_EVENTS processes
                # them at once, so a client that does read is not refused
                # for stale accounting (an inline reply can be that quick).
                router.getsockopt(zmq.EVENTS)
                send_frames(router, msg)
        except zmq.Again:
            logger.warning("%s: dropping a reply to a client that does not read its "
                           "replies (%d queued already); its call will time out",
                           self._name, self._config.reply_hwm)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            logger.debug("%s: client gone before its reply was sent", self._name)

    # Workers #################################################################

    def _worker_main(self) -> None:
        push = self._context.socket(zmq.PUSH)
        push.linger = 0
        push.sndhwm = 0
        push.connect(self._replies_addr)
        try:
            while True:
                msg = self._inbox.get()
                if msg is None:
                    return
                if isinstance(msg, tuple):  # (identity, request decoded by the I/O thread)
                    reply = [msg[0], *self._serve(msg[1])]
                else:
                    reply = [msg[0], *self.handle(msg[1:])]
                try:
                    # The PULL end has no bound on its queue, so the only
                    # refusal is a closed one: the server is stopping.
                    send_frames(push, reply)
                except zmq.Again:
                    logger.debug("%s stopping: reply dropped", self._name)
        finally:
            push.close()

    def handle(self, frames: Sequence[Any]) -> list[Any]:
        """Decodes, validates and serves one request; returns reply frames.

        Never raises: every failure becomes an error reply.

        Args:
            frames: The request's frames without the routing identity.
        """
        decoded = self._decode(frames)
        return self._serve(decoded) if isinstance(decoded, protocol.Request) else decoded

    def _decode(self, frames: Sequence[Any]) -> protocol.Request | list[Any]:
        """The validated request, or the error reply refusing it."""
        try:
            return protocol.decode_request(frames, self._config.max_message_bytes)
        except ProtocolError as exc:
            logger.debug("malformed request refused: %s", exc)
            return protocol.encode_error(protocol.peek_id(frames), "ProtocolError", str(exc))

    def _serve(self, request: protocol.Request) -> list[Any]:
        """Runs a validated request's handler; returns the reply frames."""
        handler = self._handlers.get(request.op)
        if handler is None:
            return protocol.encode_error(
                request.id, "ProtocolError",
                f"unknown op {request.op!r}; this server serves {sorted(self._handlers)}")
        try:
            result, tensors = handler(request.args, request.tensors)
            return protocol.encode_reply(request.id, result, tensors)
        except _EXPECTED as exc:
            logger.debug("op %r refused: %s: %s", request.op, type(exc).__name__, exc)
            return protocol.encode_error(request.id, type(exc).__name__, str(exc))
        except Exception as exc:
            logger.exception("op %r failed", request.op)
            return protocol.encode_error(request.id, type(exc).__name__, str(exc))

    def _ping(self, args: dict[str, Any], tensors: list[Tensor]
              ) -> tuple[dict[str, Any], list[Tensor]]:
        return {"version": protocol.PROTOCOL_VERSION, "name": self._name,
                "ops": sorted(self._handlers)}, []
