"""The RPC client's side of shared memory: lending a segment for a call's
reply, and turning the reply into views of it.

A call that says how many bytes its reply's tensors take (``reply_bytes``)
to a server on this host gets a segment from that server's
:class:`~pyg_dist.rpc.shm.lending.SegmentPool`; the request's ``shm`` header
field names it, and the reply's tensors come back as views into it
(:class:`Lease`). Which host a server runs on the client learns from its
``ping`` (asked once, in the background, by the first call that could lend:
that call and those until the answer travel over the socket; later clients
of the process know it).

A server that cannot use a segment answers ``SharedMemoryError``. If it lost
it (it restarted, or unmapped it at its bound) the pool gives up its idle
segments and the call is sent again into a new one; if it cannot map ours at
all the pool stops lending; either way, a call refused twice is sent again
over the socket. A
segment whose call failed otherwise is never reused: the server may still
write into it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any, Optional

from torch import Tensor

from pyg_dist.errors import ProtocolError, RemoteError, SharedMemoryError
from pyg_dist.rpc.shm.files import ALIGN, MIN_BYTES, Segment, remove_stale_segments, this_host, view
from pyg_dist.rpc.shm.lending import SegmentPool
from pyg_dist.rpc.wire_format import Reply

logger = logging.getLogger(__name__)

RELEASE_WAIT_S = 2.0
"""How long a closing client waits, for all servers together, for their
``release`` answers (:meth:`Lender.close`)."""
MAX_TENSORS = 64  # as many as a reply may carry (pyg_dist.rpc.wire_format)

_UNKNOWN, _ASKING = "?", "..."  # a server's host before its ping answered
# Hosts learned by any client of this process (and inherited by a forked
# child, whose clients start afresh), by endpoint. Plain dict operations,
# no lock: a lock held by another thread at fork would be held forever.
_KNOWN: dict[str, Optional[str]] = {}
Send = Callable[..., futures.Future]
"""``send(server, op, args, tensors, timeout, lease) -> Future``."""


class Lease:
    """One segment lent for one call.

    Args:
        pool: The pool it came from.
        segment: The segment.
        drops: Keys of segments the server should unmap, sent along.
    """

    def __init__(self, pool: SegmentPool, segment: Segment, drops: list[list[str]],
                 nbytes: int = 0) -> None:
        self.nbytes = nbytes  # what the call asked for
        self.pool = pool
        self.segment = segment
        self.drops = drops
        self._done = False
        self._lock = threading.Lock()

    def spec(self) -> dict[str, Any]:
        """The request's ``shm`` header field."""
        return self.segment.spec(self.drops)

    def views(self, layout: Sequence[tuple[Any, list[int], int]]) -> list[Tensor]:
        """The reply's tensors, ``(dtype, shape, offset)`` each, as views.

        Raises:
            SharedMemoryError: if one does not lie inside the segment.
        """
        self.segment.announce()
        return [view(self.segment.payload, offset, dtype, shape)
                for dtype, shape, offset in layout]

    def _finish(self) -> bool:
        with self._lock:
            done, self._done = self._done, True
        return not done

    def release(self) -> None:
        """The caller is done with the reply: the segment may be reused."""
        if self._finish():
            self.segment.announce()  # the server answered: it holds it mapped
            self.pool.release(self.segment)

    def abandon(self) -> None:
        """The call failed, or its reply was dropped unreleased: the server
        (or a view) may still use the segment, so it is never reused."""
        if self._finish():
            self.pool.restore_dropped(self.drops)
            self.pool.discard(self.segment)

    def refused(self, message: str) -> None:
        """The server answered ``SharedMemoryError``."""
        announced = self.segment.announced
        self.abandon()
        if announced:
            self.pool.discard_idle()  # it lost them: restarted, or over its bound
        else:
            self.pool.disable(message)  # it cannot map ours at all


class Lender:
    """A client's segment pools, one per server, and the calls into them.

    Args:
        endpoints: The servers, by index.
        limit_bytes: Most bytes lent to each server (``0``: none).
        hosts: Each server's :func:`~pyg_dist.rpc.shm.host_id`, where known
            (else learned from its ``ping``).
    """

    def __init__(self, endpoints: Sequence[str], limit_bytes: int,
                 hosts: Optional[Sequence[Optional[str]]] = None) -> None:
        self.endpoints = list(endpoints)
        self.limit_bytes = int(limit_bytes)
        self._here = this_host() if self.limit_bytes > 0 else None
        self._hosts: list[Optional[str]] = list(hosts) if hosts is not None \
            else [_KNOWN.get(e, _UNKNOWN) for e in self.endpoints]
        self._lock = threading.Lock()
        self._pools: dict[int, SegmentPool] = {}

    def pool(self, server: int) -> SegmentPool:
        """The pool of segments lent to ``server`` (whose host is known)."""
        with self._lock:
            pool = self._pools.get(server)
            if pool is None:
                if not self._pools and self.limit_bytes:
                    remove_stale_segments()
                limit = self.limit_bytes if self._here is not None \
                    and self._hosts[server] == self._here else 0
                pool = self._pools[server] = SegmentPool(limit, self.endpoints[server])
                if self.limit_bytes and not limit:
                    pool.disabled = "the server runs on another host"
            return pool

    def lease(self, server: int, nbytes: int, ping: Callable[[int], futures.Future]
              ) -> Optional[Lease]:
        """A segment for a reply of ``nbytes`` to ``server``, or ``None``
        (the reply travels over the socket).

        Args:
            server: The server's index.
            nbytes: Bytes the reply's tensors take.
            ping: Starts a ``ping`` of a server, to learn its host.
        """
        if nbytes < MIN_BYTES or self._here is None:
            return None
        with self._lock:
            host = self._hosts[server]
            if host == _UNKNOWN:
                self._hosts[server] = _ASKING
        if host == _UNKNOWN:
            self._ask_host(server, ping)
            return None
        if host == _ASKING:
            return None
        pool = self.pool(server)
        # Room for each tensor's region to start on a cache line.
        segment = pool.acquire(nbytes + ALIGN * MAX_TENSORS)
        if segment is None:
            return None
        return Lease(pool, segment, pool.take_dropped(), nbytes)

    def learn(self, server: int, host: Any) -> None:
        """Records the host a server's ``ping`` reported."""
        host = host if isinstance(host, str) else None
        _KNOWN[self.endpoints[server]] = host
        with self._lock:
            self._hosts[server] = host

    def _ask_host(self, server: int, ping: Callable[[int], futures.Future]) -> None:
        def learned(future: futures.Future) -> None:
            try:
                self.learn(server, future.result().result.get("host"))
            except Exception as exc:  # ask again on a later call
                logger.debug("ping of %s failed: %s", self.endpoints[server], exc)
                with self._lock:
                    self._hosts[server] = _UNKNOWN

        try:
            ping(server).add_done_callback(learned)
        except Exception as exc:
            logger.debug("cannot ping %s: %s", self.endpoints[server], exc)
            with self._lock:
                self._hosts[server] = _UNKNOWN

    def call(self, send: Send, server: int, op: str, args: Optional[dict[str, Any]],
             tensors: Sequence[Tensor], timeout: Optional[float], lease: Lease,
             outer: Optional[futures.Future] = None, again: bool = True) -> futures.Future:
        """Sends a call whose reply goes into ``lease``; returns the future
        of its :class:`Reply` (tensors: views, until ``Reply.release()``).
        A ``SharedMemoryError`` answer sends it again (see the module)."""
        if outer is None:
            outer = futures.Future()
            outer.set_running_or_notify_cancel()
        try:
            inner = send(server, op, args, tensors, timeout, lease)
        except BaseException:
            lease.abandon()
            raise

        def done(inner: futures.Future) -> None:
            exc = inner.exception()
            if exc is None:
                _complete(outer, inner.result(), lease)
            elif isinstance(exc, RemoteError) and exc.remote_type == "SharedMemoryError":
                lease.refused(exc.remote_message)
                fresh = self.lease(server, lease.nbytes, _no_ping) if again else None
                try:
                    if fresh is not None:
                        self.call(send, server, op, args, tensors, timeout, fresh, outer, False)
                    else:
                        send(server, op, args, tensors, timeout, None
                             ).add_done_callback(lambda f: _chain(f, outer))
                except BaseException as error:
                    outer.set_exception(error)
            else:
                lease.abandon()
                outer.set_exception(exc)

        inner.add_done_callback(done)
        return outer

    def close(self, call_async: Callable[..., futures.Future],
              wait: float = RELEASE_WAIT_S) -> None:
        """Closes the pools and hands each server back the segments it may
        still map (its ``release`` op, through ``call_async``, the
        client's).

        Every server is asked at once and all are awaited together for at
        most ``wait`` seconds (0: sent, not awaited): a closing process must
        not wait a deadline per server that is itself stopping. A server not
        told unmaps the segments at its bound, or once it sees this process
        has exited.
        """
        with self._lock:
            pools, self._pools = self._pools, {}
        sent = []
        for server, pool in pools.items():
            keys = pool.close()
            if keys:
                try:
                    sent.append((server, len(keys), call_async(
                        server, "release", {"segments": keys}, timeout=RELEASE_WAIT_S)))
                except Exception as exc:
                    self._release_failed(server, len(keys), exc)
        if not sent or wait <= 0:
            return
        futures.wait([future for *_, future in sent], timeout=wait)
        for server, count, future in sent:
            exc = future.exception(0) if future.done() else TimeoutError(f"{wait} s")
            if exc is not None:
                self._release_failed(server, count, exc)

    def _release_failed(self, server: int, count: int, exc: BaseException) -> None:
        logger.debug("release of %d segments on %s failed: %s", count,
                     self.endpoints[server], exc)


def _complete(outer: futures.Future, reply: Reply, lease: Lease) -> None:
    if reply.shm is None:  # the handler answered over the socket after all
        lease.release()
        outer.set_result(reply)
        return
    try:
        reply.tensors = lease.views(reply.shm)
    except SharedMemoryError as exc:
        lease.abandon()
        outer.set_exception(ProtocolError(f"a reply into shared memory does not fit the "
                                          f"segment lent for it: {exc}"))
        return
    reply.on_release = lease.release
    # A reply dropped unreleased: its views may live on, so never reuse it.
    weakref.finalize(reply, lease.abandon)
    outer.set_result(reply)


def _no_ping(server: int) -> futures.Future:
    raise RuntimeError("the host is known")  # a lease's server has answered a ping


def _chain(inner: futures.Future, outer: futures.Future) -> None:
    exc = inner.exception()
    if exc is None:
        outer.set_result(inner.result())
    else:
        outer.set_exception(exc)
