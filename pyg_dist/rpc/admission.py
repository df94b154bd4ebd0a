"""Which thread serves a request, whether the server takes it, how its reply leaves.

Three decisions of :class:`~pyg_dist.rpc.server.RpcServer` that follow what
a request *costs* rather than how big it is:

* **Route by cost.** A request of a few bytes can ask for a huge answer (a
  90-byte ``sample`` with replacement and fan-out 67,000,000 stalled every
  client for 14.8 s on the I/O thread). Each operation may give an
  :data:`Estimator` of its answer's bytes; a request whose estimate exceeds
  ``inline_reply_bytes`` goes to a worker however small it is.
* **Admit within the reply budgets.** The estimate (answer and working
  memory) is charged to the client
  (:class:`~pyg_dist.rpc.reply_budget.ReplyBudget`) before the handler runs,
  and only the reply's bytes once it is computed; over a budget the request
  gets a ``ServerBusyError`` reply and nothing is computed.
  A handler that learns what it holds as it goes (a ``sample_tree``, hop
  by hop) revises its charge (:func:`running_charge`).
* **Send tracked.** The reply's charge is released when libzmq has handed it
  to the kernel (a ``MessageTracker`` on its last frame).

Request bytes queued for workers are counted too, so a full inbox is full in
bytes as well as in requests.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Optional

import zmq
from torch import Tensor

from pyg_dist.errors import ReplyBudgetError, ServerBusyError
from pyg_dist.rpc import wire_format
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.connections import ReceiveGuard
from pyg_dist.rpc.reply_budget import ReplyBudget
from pyg_dist.rpc.sockets import NOBLOCK, send_frames

logger = logging.getLogger(__name__)

Estimator = Callable[[dict[str, Any], list[Tensor]], int]
"""``estimator(args, tensors) -> bytes``: an upper bound of the memory the
operation allocates while it serves the request (its answer and its working
memory). It may raise on bad input (an answer over the reply limit
included); the handler then refuses the request itself."""

Serve = Callable[[wire_format.Request], list[Any]]

_RUNNING: contextvars.ContextVar[Optional[RunningCharge]] = \
    contextvars.ContextVar("pyg_dist_running_charge", default=None)


class RunningCharge:
    """The reply-budget charge of the request the current thread serves.

    Args:
        budget: The server's reply budget.
        client: The request's client.
        charged: What its admission charged (the operation's estimate).
    """

    def __init__(self, budget: ReplyBudget, client: bytes, charged: int) -> None:
        self._budget = budget
        self._client = client
        self.charged = int(charged)

    def revise(self, nbytes: int) -> None:
        """Charges ``nbytes`` instead (what the request holds now and may
        still build), up or down, from now until its reply is computed."""
        nbytes = max(int(nbytes), 0)
        self._budget.revise(self._client, self.charged, nbytes)
        self.charged = nbytes


def running_charge() -> Optional[RunningCharge]:
    """The charge of the request this thread serves, for its handler to
    revise; ``None`` outside an admitted request (or one charged nothing)."""
    return _RUNNING.get()

_MORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)


class Admission:
    """Cost routing, reply budgets and tracked sends of one server.

    Args:
        config: The server's configuration (limits and budgets).
        estimators: Operation name -> :data:`Estimator`.
        worker_ops: Operations always served by a worker.
        name: The server's name, for logs.
    """

    def __init__(self, config: RpcConfig, estimators: Mapping[str, Estimator],
                 worker_ops: Collection[str], name: str) -> None:
        self.config = config
        self.name = name
        self.budget = ReplyBudget(config.client_reply_budget, config.server_reply_budget)
        self._estimators = dict(estimators)
        self._worker_ops = frozenset(worker_ops)
        self._queued = 0
        self._queued_lock = threading.Lock()
        self._guard: Optional[ReceiveGuard] = None

    # Connections (I/O thread) ##############################################

    def watch(self, router: zmq.Socket) -> None:
        """Starts accounting the connections of ``router`` (before it binds,
        so that no connection is accepted unseen)."""
        self._guard = ReceiveGuard(router, self.config.client_receive_budget,
                                   self.config.server_receive_budget,
                                   self.config.curve_server, self.name)

    @property
    def guard(self) -> ReceiveGuard:
        """The :class:`~pyg_dist.rpc.connections.ReceiveGuard` of the
        watched ROUTER."""
        if self._guard is None:
            raise RuntimeError("Admission.watch() was not called")
        return self._guard

    def account(self, events: bool) -> None:
        """Takes connection events (``events``: the monitor is readable) and
        runs the periodic check of both budgets when it is due."""
        guard, budget = self.guard, self.budget
        if events:
            for client in guard.handle_events():
                budget.forget(client)
        now = time.monotonic()
        if guard.due(now):
            guard.check(now, self._queued)
            budget.poll()
            if budget.total:
                for client in guard.drained():
                    budget.drained(client)

    def close(self) -> None:
        """Stops watching (closes the monitor and the duplicate descriptors)."""
        if self._guard is not None:
            self._guard.close()
            self._guard = None

    def usage(self) -> dict[str, int]:
        """What the budgets see now (for monitoring and tests).

        Returns:
            ``receive_*``: figures of the last check of what libzmq holds
            (:meth:`ReceiveGuard.usage
            <pyg_dist.rpc.connections.ReceiveGuard.usage>`);
            ``queued_bytes``: requests waiting for or served by workers;
            ``reply_bytes``: bytes held for replies (``reply_bytes_peak``:
            the most at once so far); ``replies_refused``: requests refused
            for the reply budgets.
        """
        guard = self._guard
        usage = {f"receive_{k}": v for k, v in (guard.usage() if guard else {}).items()}
        usage.update(queued_bytes=self._queued, reply_bytes=self.budget.total,
                     reply_bytes_peak=self.budget.peak, replies_refused=self.budget.refused)
        return usage

    # Queued request bytes ##################################################

    def queued(self, nbytes: int) -> None:
        """Counts a request handed to the workers (any thread)."""
        with self._queued_lock:
            self._queued += nbytes

    def unqueued(self, nbytes: int) -> None:
        """Uncounts a request a worker finished (any thread)."""
        with self._queued_lock:
            self._queued -= nbytes

    def inbox_full(self) -> bool:
        """Whether the requests queued for workers fill their share (half) of
        the server's receive budget; the other half is for what libzmq holds."""
        return self._queued >= self.config.server_receive_budget // 2

    # Routing and admission #################################################

    def estimate(self, request: wire_format.Request) -> int:
        """The operation's estimate of the answer's bytes (0 when it has none
        or the request is bad: its handler refuses that)."""
        estimator = self._estimators.get(request.op)
        if estimator is None:
            return 0
        try:
            return max(0, int(estimator(request.args, request.tensors)))
        except Exception:  # bad input: the handler refuses it with a clear reply
            return 0

    def for_worker(self, request: wire_format.Request, estimate: int) -> bool:
        """Whether a small request is slow all the same (a huge answer, an
        operation that always is)."""
        return request.op in self._worker_ops or estimate > self.config.inline_reply_bytes

    def answer(self, client: bytes, request: wire_format.Request, estimate: int,
               serve: Serve) -> tuple[int, list[Any]]:
        """Charges the answer to the client's reply budget and serves it.

        Args:
            client: The routing id of the client.
            request: The decoded request.
            estimate: :meth:`estimate` of it.
            serve: Runs the handler; returns the reply frames.

        Returns:
            ``(charge, reply frames)``: the bytes that stay charged until the
            reply has left (``0`` for replies without tensors).
        """
        never = self.budget.never_fits(request.op, estimate)
        if never is not None:
            logger.info("%s: refused %s: %s", self.name, request.op, never)
            return 0, wire_format.encode_error(request.id, ReplyBudgetError.__name__, never)
        refusal = self.budget.reserve(client, estimate)
        if refusal is not None:
            logger.info("%s: refused %s: %s", self.name, request.op, refusal)
            return 0, wire_format.encode_error(request.id, ServerBusyError.__name__, refusal)
        running = RunningCharge(self.budget, client, estimate) if estimate else None
        token = _RUNNING.set(running)
        try:
            frames = serve(request)
        finally:
            _RUNNING.reset(token)
        charged = running.charged if running is not None else 0
        # Once computed, only the reply's own bytes stay charged (the working
        # memory is free again); errors and answers written into shared
        # memory hold nothing, views of resident data are charged no more
        # than estimated.
        charge = min(estimate, sum(len(f) for f in frames[1:])) if estimate else 0
        self.budget.settle(client, charged, charge)
        return charge, frames

    # Sending ###############################################################

    def send(self, router: zmq.Socket, msg: list[Any], charge: int = 0) -> None:
        """Sends a reply (routing id first) without blocking, tracked when its
        charge asks for it; a reply libzmq refuses is dropped and logged.

        Raises:
            zmq.ZMQError: on errors other than a full queue or a gone client.
        """
        client = msg[0].bytes if charge else b""
        track = self.budget.wants_tracking(client, charge)
        try:
            try:
                tracker = _send_tracked(router, msg) if track else send_frames(router, msg)
            except zmq.Again:
                # libzmq learns that a client read its replies from commands
                # it processes only now and then; reading ZMQ_EVENTS processes
                # them at once, so a client that does read is not refused
                # for stale accounting (an inline reply can be that quick).
                router.getsockopt(zmq.EVENTS)
                tracker = _send_tracked(router, msg) if track else send_frames(router, msg)
        except zmq.Again:
            self.budget.dropped(client, charge)
            logger.warning("%s: dropping a reply to a client that does not read its "
                           "replies (%d queued already); its call will time out",
                           self.name, self.config.reply_hwm)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self.budget.dropped(client, charge)
            logger.debug("%s: client gone before its reply was sent", self.name)
        else:
            self.budget.sent(client, charge, tracker)


def _send_tracked(router: zmq.Socket, msg: list[Any]) -> Optional[zmq.MessageTracker]:
    """Sends ``msg`` with a tracker on its last frame (done once libzmq
    handed the whole message to the kernel: frames leave in order)."""
    for frame in msg[:-1]:
        router.send(frame, _MORE_NOBLOCK, copy=False)
    last = msg[-1]
    # pyzmq copies (and cannot track) frames under its copy threshold; this
    # one must be tracked, so it goes without copying whatever its size, as
    # a view on the memory of the frame received from a worker.
    threshold, router.copy_threshold = router.copy_threshold, 0
    try:
        return router.send(last.buffer if isinstance(last, zmq.Frame) else last,
                           NOBLOCK, copy=False, track=True)
    finally:
        router.copy_threshold = threshold
