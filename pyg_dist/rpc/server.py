"""A generic ZeroMQ RPC server: a ROUTER socket in front of worker threads.

Threads and sockets (ZeroMQ sockets are not thread-safe, so each has exactly
one owner)::

    clients ==tcp==> ROUTER --(I/O thread)--> work queue --> worker 1..N
                       ^      |                                   |
                       |      +-- small request: served inline    |
                       +--(I/O thread)-- PULL <==inproc== PUSH ---+

The I/O thread owns the ROUTER and the PULL socket. A request of at most
``RpcConfig.inline_bytes`` (all frames together) whose answer the operation
estimates at most ``RpcConfig.inline_reply_bytes`` is decoded, validated and
served right there on the I/O thread: no queue, no worker wake-up, no inproc
hop, which is most of the cost of a small call. Every bigger request, and
every small one with a big answer, goes to a bounded
:class:`~pyg_dist.rpc.work_queue.WorkQueue`, which wakes the worker that went
idle last (its caches are the warm ones); when that queue is full (in
requests or in bytes) the I/O thread stops reading the ROUTER, so TCP pushes
back instead of memory growing.

Byte budgets against hostile peers live in
:class:`~pyg_dist.rpc.admission.Admission`: connections for which libzmq
holds too much are cut, requests whose answers would take the reply bytes
held for a client, or for all, over budget are refused. Workers
decode and validate a request (:func:`~pyg_dist.rpc.wire_format.decode_request`)
before the handler sees it, run the handler (torch releases the GIL, so
workers run in parallel), and push the reply frames back over their own
``inproc`` PUSH socket; the I/O thread forwards them to the client. Any
exception a message causes, in the decoder or a handler, becomes an error
reply carrying its type name and message (or, where no reply can be built,
a logged drop); the server keeps serving everyone else (see
:mod:`pyg_dist.rpc.dispatch`). Only a broken socket stops a thread, and
then the whole server stops with :attr:`RpcServer.failure` set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Optional

import zmq
from zmq.auth.thread import ThreadAuthenticator

from pyg_dist.errors import TransportError
from pyg_dist.rpc import wire_format
from pyg_dist.rpc.admission import Admission, Estimator
from pyg_dist.rpc.config import RpcConfig, default_config
from pyg_dist.rpc.dispatch import Dispatch, Handler
from pyg_dist.rpc.op_spec import RPC_OPS, OpSpec
from pyg_dist.rpc.shm.serving import SegmentService
from pyg_dist.rpc.sockets import recv_frames, router_socket, send_frames, start_authenticator
from pyg_dist.rpc.work_queue import WorkQueue

logger = logging.getLogger(__name__)

__all__ = ["Estimator", "Handler", "RpcServer"]

_STOP = b"stop"
_POLL_FULL_MS = 10
# Requests the I/O thread takes from the ROUTER in one go before it looks at
# workers' replies (and a stop request) again.
_BATCH = 64


class RpcServer:
    """Serves a table of operations over a ZeroMQ ROUTER socket.

    Besides the given handlers every server answers ``ping`` with the
    protocol version, its name, its host (:func:`pyg_dist.rpc.shm.host_id`)
    and the operations it serves (and, asked with ``{"usage": true}``, with
    ``usage``: :meth:`budget_usage`, for monitoring a server in another
    process), and ``release`` (a client hands back shared memory it lent,
    :mod:`pyg_dist.rpc.shm`).

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
        estimators: Operation name -> :data:`Estimator` of its answer's
            size. A request whose estimate exceeds
            ``config.inline_reply_bytes`` goes to a worker, and the estimate
            is charged to the client's reply budget before the handler runs.
            Operations without one are charged nothing.
        ops: Declarations (:class:`~pyg_dist.rpc.op_spec.OpSpec`) of the
            handlers' operations: a request that does not fit its op's
            declaration (unknown or missing arguments, tensor count) is
            refused before anything else looks at it, and ops declared
            ``worker`` are served by a worker. ``ping`` and ``release`` are
            always declared.
    """

    def __init__(self, handlers: Mapping[str, Handler], bind: str = "tcp://127.0.0.1:0",
                 config: Optional[RpcConfig] = None, name: str = "pyg-dist",
                 worker_ops: Collection[str] = (),
                 estimators: Optional[Mapping[str, Estimator]] = None,
                 ops: Optional[Mapping[str, OpSpec]] = None) -> None:
        self._config = config or default_config()
        self._ops = {**(ops or {}), **RPC_OPS}
        worker_ops = {*worker_ops, *(s.name for s in self._ops.values() if s.worker)}
        self._admission = Admission(self._config, estimators or {}, worker_ops, name)
        # Per server: one flooded server must not silence another's log.
        self._shm = SegmentService()
        self._dispatch = Dispatch(handlers, self._ops, self._shm, name,
                                  self._config.max_message_bytes, self.budget_usage)
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
        self._error: Optional[BaseException] = None  # why start() failed
        self._failure: Optional[BaseException] = None  # why a running thread died
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

    @property
    def failure(self) -> Optional[BaseException]:
        """What stopped the server on its own (its I/O thread's socket broke,
        or a worker died), or ``None``. When set, :meth:`wait` returns and
        the server serves no more; call :meth:`stop` and exit non-zero."""
        return self._failure

    def start(self) -> str:
        """Binds the socket, starts the threads and returns the endpoint.

        Raises:
            TransportError: if the endpoint cannot be bound.
        """
        if self._threads:
            return self.endpoint
        self._ctx = zmq.Context()
        self._auth = start_authenticator(self._ctx, self._config, self._bind)
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
        call more than once and from any thread. Workers still inside an
        operation after ``timeout`` are left to finish on their own (they are
        daemon threads: a process that exits next does not wait for them).

        Args:
            timeout: How long to wait for all the threads together.
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
        # One deadline for all: four workers each deep in a long operation
        # must not add up to four timeouts.
        deadline = time.monotonic() + timeout
        io = self._threads[0] if self._threads else None
        if io is not None:
            io.join(timeout)  # it no longer fills the inbox after this
            if io.is_alive():
                alive.append(io.name)
        # Drop what is still queued (nobody could send its reply any more)
        # and let every worker's next get() return None.
        self._inbox.close()
        for thread in self._threads[1:]:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                alive.append(thread.name)
        if self._auth is not None:
            self._auth.stop()
        self._shm.close()
        if alive:
            # Terminating the context would block on their sockets.
            logger.warning("threads still running after stop: %s", ", ".join(alive))
            return
        self._ctx.term()
        logger.info("%s on %s stopped", self._name, self._endpoint)

    def budget_usage(self) -> dict[str, int]:
        """What the byte budgets see now (for monitoring and tests); see
        :meth:`Admission.usage <pyg_dist.rpc.admission.Admission.usage>`."""
        return self._admission.usage()

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
        router = router_socket(self._context, self._config)
        self._admission.watch(router)  # before the first connection is accepted
        try:
            router.bind(self._bind)
        except zmq.ZMQError:
            self._admission.close()
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
            self._admission.close()
            for sock in (router, replies):
                if sock is not None:
                    sock.close()
            self._ready.set()
            return
        self._ready.set()
        try:
            self._io_loop(router, replies)
        except BaseException as exc:  # a broken socket: nobody can be served any more
            logger.critical("I/O thread of %s failed; the server stops", self._name,
                            exc_info=exc)
            self._failure = exc
            self._stopped.set()
        finally:
            self._admission.close()
            router.close()
            replies.close()

    def _io_loop(self, router: zmq.Socket, replies: zmq.Socket) -> None:
        admission = self._admission
        monitor = admission.guard.monitor
        both, only_replies = zmq.Poller(), zmq.Poller()
        both.register(router, zmq.POLLIN)
        both.register(replies, zmq.POLLIN)
        both.register(monitor, zmq.POLLIN)
        only_replies.register(replies, zmq.POLLIN)
        only_replies.register(monitor, zmq.POLLIN)
        stopped = self._stopped
        while True:
            full = self._inbox_full()
            timeout = admission.guard.timeout_ms(time.monotonic())
            if full:
                timeout = _POLL_FULL_MS if timeout is None else min(timeout, _POLL_FULL_MS)
            events = dict((only_replies if full else both).poll(timeout))
            if replies in events and self._forward_replies(router, replies):
                return
            admission.account(monitor in events)
            if router not in events:
                continue
            for _ in range(_BATCH):
                if self._inbox_full() or stopped.is_set():
                    break
                msg = recv_frames(router)
                if msg is None:
                    break
                admission.guard.took(msg)
                answer = self._take(msg)
                if answer is None:  # queued for a worker
                    continue
                if stopped.is_set():  # as a worker's reply: dropped
                    return
                self._admission.send(router, [msg[0], *answer[1]], answer[0])

    def _inbox_full(self) -> bool:
        return self._inbox.full() or self._admission.inbox_full()

    def _queue(self, item: tuple[int, Any, Any, Any]) -> None:
        self._admission.queued(item[0])
        self._inbox.put_nowait(item)  # only the I/O thread puts: never full here

    def _take(self, msg: list[Any]) -> Optional[tuple[int, list[Any]]]:
        """Serves a request inline, or queues it for a worker (``None``).

        Returns:
            ``(charge, reply frames)`` of a request served here.
        """
        inline_bytes = self._config.inline_bytes if self._config.workers else -1
        size = sum(map(len, msg)) - len(msg[0])
        if inline_bytes >= 0 and size > inline_bytes:
            self._queue((size, msg[0], msg[1:], None))
            return None
        decoded = self._dispatch.decode(msg[1:])  # inline: no hand-off
        if not isinstance(decoded, wire_format.Request):
            return 0, decoded
        admission = self._admission
        estimate = admission.estimate(decoded)
        if inline_bytes >= 0 and admission.for_worker(decoded, estimate):
            self._queue((size, msg[0], decoded, estimate))  # slow however small
            return None
        return admission.answer(msg[0].bytes, decoded, estimate, self._dispatch.serve)

    def _forward_replies(self, router: zmq.Socket, replies: zmq.Socket) -> bool:
        """Sends the workers' finished replies; returns whether to stop."""
        while True:
            msg = recv_frames(replies)
            if msg is None:
                return False
            if len(msg) == 1:  # the stop poke
                return True
            self._admission.send(router, msg[1:], int.from_bytes(msg[0].bytes, "little"))

    # Workers #################################################################

    def _worker_main(self) -> None:
        push: Optional[zmq.Socket] = None
        try:
            push = self._context.socket(zmq.PUSH)
            push.linger = 0
            push.sndhwm = 0
            push.connect(self._replies_addr)
            while True:
                msg = self._inbox.get()
                if msg is None:
                    return
                # decode and serve never raise but for FATAL (below): a
                # request fails alone.
                reply = self._dispatch.answer_queued(msg, self._admission)
                try:
                    # The PULL end has no bound on its queue, so the only
                    # refusal is a closed one: the server is stopping.
                    send_frames(push, reply)
                except zmq.Again:
                    logger.debug("%s stopping: reply dropped", self._name)
        except BaseException as exc:
            # A broken socket, or SystemExit/KeyboardInterrupt in a handler:
            # with a worker gone, requests would wait for it forever; stop.
            if not self._closed:
                logger.critical("a worker of %s failed; the server stops", self._name,
                                exc_info=exc)
                self._failure = self._failure or exc
                self._stopped.set()
        finally:
            if push is not None:
                push.close()

    def handle(self, frames: Sequence[Any]) -> list[Any]:
        """Decodes, validates and serves one request; returns reply frames.

        Never raises: every failure becomes an error reply.

        Args:
            frames: The request's frames without the routing identity.
        """
        return self._dispatch.handle(frames)
