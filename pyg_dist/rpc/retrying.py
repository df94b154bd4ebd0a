"""The one retry and failover layer of the trainer's calls.

:class:`RetryingClient` is what the stores and the sampler call (through
:class:`~pyg_dist.routing.id_router.Router`): ``call_async(part, op, ...)``
returns a future of the :class:`~pyg_dist.rpc.Reply`, and everything that
happens between a first attempt and that future's outcome happens here, in
one place, by one policy:

* **Failover.** Part ``k`` may be served by several replicas (``[[a, a2],
  b]``). A call goes to the group's preferred replica; a replica that
  failed moves to the back of the group's order, so later calls go straight
  to a live one.
* **Retries.** A call of an op declared :attr:`~pyg_dist.rpc.op_spec.OpSpec.
  retry_safe` that timed out or lost its server
  (:class:`~pyg_dist.errors.RpcTimeoutError`,
  :class:`~pyg_dist.errors.TransportError`) goes to the next replica at
  once; once every replica of the group was tried it is sent again after
  ``config.retry_backoff`` (doubling up to ``config.retry_backoff_max``),
  ``config.retries`` more times. Ops that are not retry-safe, and remote
  errors (the server answered with a refusal another attempt would get
  too), are never re-sent.
* **Back-pressure.** A server that refused a call as busy
  (``ServerBusyError``: its reply budget is spent by answers in flight)
  refused it before computing anything, so the call is asked again after a
  pause, whatever the op, until its deadline has passed; that is not a
  retry and counts none.
* **Lent memory.** Only the first attempt may have its reply written into
  shared memory the client lends (``reply_bytes``), or into the caller's
  own outputs (a :class:`FirstAttempt`, e.g. a ``get`` whose server writes
  its rows in place); a re-sent call is the plain request, answered over
  the socket, so a late first answer can never land in memory a later one
  is using. A server that refuses to write into the caller's outputs
  (``SharedMemoryError``: it cannot map them) is asked the plain request at
  once; that is a fallback, not a retry.
* **Checked replies.** Every reply of a declared op is checked against its
  :class:`~pyg_dist.rpc.op_spec.OpSpec` before the caller sees it.

Below it, :class:`~pyg_dist.rpc.client.RpcClient` makes single attempts: one
request, one deadline, one outcome.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Generic, Optional, Protocol, TypeVar, Union

from torch import Tensor

from pyg_dist.errors import (
    RemoteError,
    RpcError,
    RpcTimeoutError,
    ServerBusyError,
    SharedMemoryError,
    TransportError,
)
from pyg_dist.rpc.client import RpcClient, fail
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.op_spec import RPC_OPS, OpSpec
from pyg_dist.rpc.shm.lender import RELEASE_WAIT_S
from pyg_dist.rpc.wire_format import Reply

logger = logging.getLogger(__name__)

# Time a caller waits for a future beyond every attempt's deadline: the
# client completes every future itself; this only guards against an I/O
# thread that is stuck.
_GRACE_S = 5.0

Replicas = Sequence[Union[str, Sequence[str]]]


class PartitionClient(Protocol):
    """What the trainer side calls partition servers through.

    :class:`RetryingClient` is the real one; unit tests may stand an
    in-process one in its place.
    """

    @property
    def config(self) -> RpcConfig:
        """Deadlines and limits."""

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Per server index, the endpoint calls go to now (for messages)."""

    def call_async(self, server: int, op: str, args: Optional[dict[str, Any]] = None,
                   tensors: Sequence[Tensor] = (), timeout: Optional[float] = None, *,
                   reply_bytes: Optional[int] = None,
                   first: Optional[FirstAttempt] = None) -> futures.Future:
        """Starts a call; its future holds the checked :class:`Reply`."""

    def result(self, future: futures.Future, server: int, op: str,
               timeout: Optional[float] = None) -> Reply:
        """Waits for a future of :meth:`call_async` (bounded)."""

    def close(self, release_wait: float = RELEASE_WAIT_S) -> None:
        """Closes every connection, waiting at most ``release_wait`` seconds
        for the servers to take back the memory lent them (0: no wait)."""


def replica_groups(replicas: Replicas) -> list[list[str]]:
    """Normalises ``["a", ["b1", "b2"]]`` into ``[["a"], ["b1", "b2"]]``.

    Args:
        replicas: Per server (part), one endpoint or a list of replicas.

    Raises:
        RpcError: if a group is empty or an endpoint appears twice.
    """
    groups = [[r] if isinstance(r, str) else [str(e) for e in r] for r in replicas]
    flat = [e for g in groups for e in g]
    if not groups or any(not g for g in groups):
        raise RpcError(f"every part needs at least one endpoint, got {list(replicas)!r}")
    if len(set(flat)) != len(flat):
        raise RpcError(f"an endpoint appears twice among the replicas {groups!r}")
    return groups


@dataclass
class FirstAttempt:
    """A first attempt that differs from the call's re-sends: it has the
    server write its answer into memory the caller lent.

    Args:
        args: The first attempt's arguments.
        tensors: The first attempt's tensors.
        given_up: Called once if the call goes on with its plain request:
            ``given_up(True)`` when the server refused to write there (it
            wrote nothing), ``given_up(False)`` when the first attempt was
            lost (a late one may still write: never reuse that memory).
    """

    args: dict[str, Any]
    tensors: Sequence[Tensor]
    given_up: Callable[[bool], None]


@dataclass
class _Call:
    """One call across its attempts."""

    server: int
    op: str
    args: Optional[dict[str, Any]]
    tensors: Sequence[Tensor]
    timeout: float
    spec: Optional[OpSpec]
    outer: futures.Future
    candidates: list[int]  # replica indices, preferred first
    failures_left: int  # re-sends still allowed after a failure
    backoff: float
    busy_until: float  # busy refusals are asked again until then
    reply_bytes: Optional[int]  # first attempt only
    first: Optional[FirstAttempt] = None  # until the call goes on without it
    tried: int = 0
    busy_pause: float = 0.0


class RetryingClient:
    """An RPC client over replica groups with the one retry policy.

    Args:
        replicas: Per server index (part), one endpoint or a list of
            replicas serving the same thing.
        config: Deadlines, limits and the retry policy (``retries``,
            ``retry_backoff``, ``retry_backoff_max``).
        ops: The op declarations (retry safety, reply checks, reply
            tensor bounds; a partition server's are
            :data:`pyg_dist.protocol.ops.OPS`); calls of an op not in it
            are sent once and not checked.
    """

    def __init__(self, replicas: Replicas, config: Optional[RpcConfig] = None,
                 ops: Mapping[str, OpSpec] = RPC_OPS) -> None:
        self.groups = replica_groups(replicas)
        flat = [e for g in self.groups for e in g]
        self._client = RpcClient(flat, config, ops)
        index = iter(range(len(flat)))
        self._order = [[next(index) for _ in g] for g in self.groups]
        self._ops = ops
        self._lock = threading.Lock()
        self._later = Later(self._resend, self._closed_meanwhile)

    @property
    def config(self) -> RpcConfig:
        """The shared configuration."""
        return self._client.config

    @property
    def transport(self) -> RpcClient:
        """The client below this layer, over every replica's endpoint (one
        attempt a call; replica ``i`` of the groups flattened in order)."""
        return self._client

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The currently preferred endpoint of every group."""
        with self._lock:
            return tuple(self._client.endpoints[order[0]] for order in self._order)

    def ping(self, server: int, timeout: Optional[float] = None) -> dict[str, Any]:
        """Pings the preferred replica of group ``server`` (see
        :meth:`RpcClient.ping`: it also tells the client whether it may lend
        that server memory)."""
        with self._lock:
            replica = self._order[server][0]
        return self._client.ping(replica, timeout)

    def call_async(self, server: int, op: str, args: Optional[dict[str, Any]] = None,
                   tensors: Sequence[Tensor] = (), timeout: Optional[float] = None, *,
                   reply_bytes: Optional[int] = None,
                   first: Optional[FirstAttempt] = None) -> futures.Future:
        """Calls ``op`` on group ``server``; returns a future of its checked
        :class:`Reply`.

        Args:
            server: Index of the replica group (the part).
            op: Operation name.
            args: msgpack-native arguments.
            tensors: Tensors sent as raw frames (not modified until done).
            timeout: Deadline of each attempt; ``config.timeout`` by default.
            reply_bytes: Bytes the reply's tensors take: a same-host server
                writes the first attempt's answer into memory lent for it
                (see :meth:`RpcClient.call_async`; release the reply once
                read).
            first: What the first attempt sends instead of ``args`` and
                ``tensors`` (see :class:`FirstAttempt`); the reply tells
                which one was answered.

        Raises:
            RpcError: if ``server`` is out of range.
        """
        if not 0 <= server < len(self.groups):
            raise RpcError(f"server index {server} is out of range; this client knows "
                           f"{len(self.groups)} servers", op=op)
        cfg = self.config
        timeout = cfg.timeout if timeout is None else float(timeout)
        spec = self._ops.get(op)
        with self._lock:
            candidates = list(self._order[server])
        retry_safe = spec is not None and spec.retry_safe
        outer: futures.Future = futures.Future()
        outer.set_running_or_notify_cancel()
        call = _Call(server, op, args, tensors, timeout, spec, outer, candidates,
                     len(candidates) - 1 + cfg.retries if retry_safe else 0,
                     cfg.retry_backoff, time.monotonic() + timeout, reply_bytes, first,
                     busy_pause=cfg.retry_backoff or 0.01)
        self._attempt(call)
        return outer

    def result(self, future: futures.Future, server: int, op: str,
               timeout: Optional[float] = None) -> Reply:
        """Waits for a future of :meth:`call_async` as long as its attempts
        may take; raises its error.

        Raises:
            RpcTimeoutError: also if the future was never completed (the
                client's I/O thread is stuck).
        """
        cfg = self.config
        each = (cfg.timeout if timeout is None else timeout) + cfg.retry_backoff_max
        attempts = len(self.groups[server]) + cfg.retries + 1  # +1: busy re-asks
        wait = attempts * each + _GRACE_S
        try:
            return future.result(wait)
        except RpcError:  # RpcTimeoutError is a TimeoutError too: keep it as is
            raise
        except futures.TimeoutError as exc:
            raise RpcTimeoutError(
                f"no outcome of {op!r} to {self.endpoints[server]} within {wait:.3g}s, "
                f"every attempt's deadline included (the RPC client's I/O thread is "
                f"stuck)", address=self.endpoints[server], op=op) from exc

    def call(self, server: int, op: str, args: Optional[dict[str, Any]] = None,
             tensors: Sequence[Tensor] = (), timeout: Optional[float] = None) -> Reply:
        """:meth:`call_async` and :meth:`result` in one."""
        return self.result(self.call_async(server, op, args, tensors, timeout), server, op,
                           timeout)

    def close(self, release_wait: float = RELEASE_WAIT_S) -> None:
        """Fails the calls waiting to be re-sent and closes every connection
        (see :meth:`RpcClient.close <pyg_dist.rpc.client.RpcClient.close>`)."""
        for call in self._later.close():
            fail(call.outer, RpcError(f"cannot call {call.op!r}: the client is closed",
                                       op=call.op))
        self._client.close(release_wait)

    def __enter__(self) -> RetryingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Attempts ################################################################

    def _attempt(self, call: _Call) -> None:
        replica = call.candidates[call.tried % len(call.candidates)]
        reply_bytes, call.reply_bytes = call.reply_bytes, None
        args, tensors = (call.args, call.tensors) if call.first is None \
            else (call.first.args, call.first.tensors)
        try:
            inner = self._client.call_async(replica, call.op, args, tensors,
                                            call.timeout, reply_bytes=reply_bytes)
        except RpcError as exc:
            self._failed(call, replica, exc)
            return
        inner.add_done_callback(lambda f: self._done(call, replica, f, args, tensors))

    @staticmethod
    def _without_first(call: _Call, refused: bool) -> None:
        first, call.first = call.first, None
        if first is not None:
            first.given_up(refused)

    def _resend(self, call: _Call) -> None:
        if not call.outer.done():
            self._attempt(call)

    @staticmethod
    def _closed_meanwhile(call: _Call, exc: BaseException) -> None:
        fail(call.outer, exc)

    def _done(self, call: _Call, replica: int, inner: futures.Future,
              args: Optional[dict[str, Any]], tensors: Sequence[Tensor]) -> None:
        # Runs with the RPC client's I/O lock held: it may start calls but
        # never waits for one (re-sends go through Later's thread).
        exc = inner.exception()
        if exc is not None:
            self._failed(call, replica, exc)
            return
        reply = inner.result()
        if call.spec is not None:
            try:
                reply = call.spec.check_reply(reply, args or {}, tensors,
                                              self._client.endpoints[replica])
            except RpcError as error:
                fail(call.outer, error)
                return
        call.outer.set_result(reply)

    def _failed(self, call: _Call, replica: int, exc: BaseException) -> None:
        address = self._client.endpoints[replica]
        if call.first is not None and isinstance(exc, RemoteError) and \
                exc.remote_type == SharedMemoryError.__name__:
            # It could not write into the caller's memory, and wrote nothing.
            logger.debug("%s cannot write %r in place (%s); asking plainly", address,
                         call.op, exc)
            self._without_first(call, True)
            self._later.at(time.monotonic(), call)
            return
        if isinstance(exc, RemoteError) and exc.remote_type == ServerBusyError.__name__:
            pause = call.busy_pause
            if time.monotonic() + pause < call.busy_until:
                call.busy_pause = min(2 * pause, max(self.config.retry_backoff_max, pause))
                logger.debug("%s is busy with %r; asking again in %.3gs", address, call.op,
                             pause)
                self._later.at(time.monotonic() + pause, call)
                return
        if not isinstance(exc, (RpcTimeoutError, TransportError)) or call.failures_left <= 0:
            fail(call.outer, exc)
            return
        call.failures_left -= 1
        call.tried += 1
        self._without_first(call, False)
        group = len(call.candidates)
        if group > 1:
            with self._lock:
                order = self._order[call.server]
                if order[0] == replica:  # demote it once, not once per call
                    order.append(order.pop(0))
        pause = 0.0
        if call.tried % group == 0:  # every replica failed once more: back off
            pause, call.backoff = call.backoff, min(2 * call.backoff,
                                                    self.config.retry_backoff_max)
        following = self._client.endpoints[call.candidates[call.tried % group]]
        logger.warning("%r to %s failed (%s: %s); sending it to %s%s", call.op, address,
                       type(exc).__name__, exc, following,
                       f" in {pause:.3g}s" if pause else "")
        call.busy_until = time.monotonic() + pause + call.timeout
        self._later.at(time.monotonic() + pause, call)


# The re-sends' timer. A call's failure is learnt in a done-callback, which
# runs with the RPC client's I/O lock held: it must not wait there (for a
# pause, or for an in-flight slot). Later takes the re-send and runs it at
# its time on a thread of its own instead.
T = TypeVar("T")


class Later(Generic[T]):
    """Runs ``run(item)`` at the times given to :meth:`at`, in time order, on
    one daemon thread (started on first use).

    Args:
        run: What to do with an item when its time comes.
        failed: Told ``(item, error)`` of an item that cannot run: handed
            in after :meth:`close`, or whose ``run`` raised.
    """

    def __init__(self, run: Callable[[T], None],
                 failed: Callable[[T, BaseException], None]) -> None:
        self._run = run
        self._failed = failed
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Any]] = []
        self._order = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def at(self, when: float, item: T) -> None:
        """Runs ``item`` at ``when`` (``time.monotonic()``), or at once if past."""
        with self._cond:
            if not self._closed:
                heapq.heappush(self._heap, (when, next(self._order), item))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._main, daemon=True,
                                                    name="pyg-dist-rpc-retries")
                    self._thread.start()
                self._cond.notify()
                return
        self._failed(item, RpcError("cannot send it again: the client is closed"))

    def close(self) -> list[T]:
        """Stops the thread; returns the items that were still due."""
        with self._cond:
            self._closed = True
            left = [item for _, _, item in self._heap]
            self._heap.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        return left

    def _main(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (
                        not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(None if not self._heap
                                    else self._heap[0][0] - time.monotonic())
                if self._closed:
                    return
                _, _, item = heapq.heappop(self._heap)
            try:
                self._run(item)
            except BaseException as exc:  # one item's failure must not stop the others
                self._failed(item, exc)
