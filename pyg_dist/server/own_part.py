"""A client that serves the parts this process holds in process, the rest sent.

A server coordinating a ``sample_tree`` (:mod:`pyg_dist.server.forwarding`)
runs the trainer's own hop loop (:mod:`pyg_dist.hops`) over a router, which
calls every owning server of a hop through a
:class:`~pyg_dist.rpc.retrying.PartitionClient`. Its own
part needs no socket: :class:`OwnPartFirst` runs that call's handler on the
calling thread, and only once the peers' calls of the same round are on
their way, so that the peers sample their shares while this one samples its
own. A trainer that maps the parts on its host (``pyg_dist.connect(colocate=
True)``, :mod:`pyg_dist.server.colocated`) serves their read ops the same way.

It is also where a tree's hops come in, so it revises the tree's charge to
the reply budget as they do (:class:`_TreeCharge`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from typing import Any, Optional

from torch import Tensor

from pyg_dist.rpc.admission import RunningCharge, running_charge
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.context import CallContext, wants_context
from pyg_dist.rpc.shm.lender import RELEASE_WAIT_S
from pyg_dist.rpc.wire_format import Reply

Result = tuple[dict[str, Any], list[Tensor]]

HELD_FACTOR = 9
"""A tree's peak memory over the hop answers it has and may still get. At
its peak a tree holds 4.8-6.4x its final answer (the peers' replies, their
reassembly, the relabelled hops, the reply's int32 copies; peak RSS of a
real server), and its final answer is ~1.2x the hop answers it is built
from (node ids on top): 9x covers the peak with room
(``tests/server/test_tree_memory.py``: charged 40 MB at most, peak 27.5-33.6
MB; 7x charged 31.1 MB and fell short once in three runs, 8x 35.6 MB)."""


class _TreeCharge:
    """One tree's charge, revised as its hops come in: before each hop,
    :data:`HELD_FACTOR` x (the bytes of the answers it has + the bound of
    the hop's answers, from the fan-out). A tree is admitted on a bound
    from its fan-outs and the graph's size (4x it,
    :meth:`~pyg_dist.server.forwarding.HopForwarder.estimate`): several
    times what it holds where sampled nodes repeat, and ~1.6x too little
    where the bound is tight. A hop of unbounded fan-out (-1) or of several
    edge types has no bound here: the charge then stays as it is.

    Args:
        charge: The tree request's running charge.
    """

    def __init__(self, charge: RunningCharge) -> None:
        self.charge = charge
        self.held = 0  # bytes of the hop answers received so far
        self._next = 0  # bound of the answers of the hop being asked
        self._unbounded = False

    def asked(self, reply_bytes: Optional[int]) -> None:
        """A call of the next hop went out, its answer bounded by
        ``reply_bytes`` (``None``: unbounded)."""
        if reply_bytes is None:
            self._unbounded = True
        else:
            self._next += int(reply_bytes)

    def revise(self) -> None:
        """The hop's calls are out (its first answer is asked for): charge
        what the tree holds and what this hop may add."""
        if self._next and not self._unbounded:
            self.charge.revise(HELD_FACTOR * (self.held + self._next))
        self._next, self._unbounded = 0, False

    def received(self, reply: Reply) -> None:
        """An answer of the hop arrived."""
        self.held += sum(t.numel() * t.element_size() for t in reply.tensors)


class OwnPartFirst:
    """A :class:`~pyg_dist.rpc.retrying.PartitionClient` that serves the calls
    to the parts it holds in this process (the handler, no socket) and sends
    the others on: the calls to other parts, and the ops a held part has no
    handler for here (a trainer's embedding ops go to their server).

    A peer's ``sample`` answers are checked where the
    tree reads them, as a trainer's are (:func:`pyg_dist.hops.one_hop.
    sample_hop`: neighbour and edge ids past the graph's), before any of it
    reaches the tree.

    Args:
        handlers: Per part held here, its handlers by op name.
        others: The client of every part (a held part's entry is used for
            the ops it has no handler for).
    """

    def __init__(self, handlers: Mapping[int, Mapping[str, Callable[..., Result]]],
                 others: Any) -> None:
        self._handlers = handlers
        self._others = others
        self._local = threading.local()  # per thread: own-part calls not served yet

    @property
    def config(self) -> RpcConfig:
        """The peers' client's configuration."""
        return self._others.config

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The peers' endpoints (for messages)."""
        return self._others.endpoints

    def call_async(self, server: int, op: str, args: Optional[dict[str, Any]] = None,
                   tensors: Sequence[Tensor] = (), timeout: Optional[float] = None, *,
                   reply_bytes: Optional[int] = None, first: Any = None) -> futures.Future:
        """Sends a call to a peer; a call to the own part is served on this
        thread when the first result of its round is asked for, so that the
        peers' calls of the same hop are on their way (and answered
        meanwhile) while this thread samples."""
        tree = self._tree()
        if tree is not None:
            tree.asked(reply_bytes)
        handlers = self._handlers.get(server)
        handler = None if handlers is None else handlers.get(op)
        if handler is None:
            return self._others.call_async(server, op, args, tensors, timeout,
                                           reply_bytes=reply_bytes, first=first)
        ctx = getattr(self._local, "ctx", None)
        if first is not None and ctx is not None:  # the caller's memory, mapped here
            args, tensors = first.args, first.tensors
        elif first is not None:
            first.given_up(True)  # nothing is lent in process: the plain request
            ctx = None
        future: futures.Future = futures.Future()
        future.own_part = True  # type: ignore[attr-defined]
        self._deferred().append((future, handler, {} if args is None else args,
                                 list(tensors), ctx))
        return future

    @contextlib.contextmanager
    def lent(self, ctx: CallContext) -> Iterator[None]:
        """Within this block, on this thread, an own-part call's first
        attempt (one that writes into memory its caller lent) is served
        with ``ctx``, the call context of the request this thread serves:
        a tree's coordinator writes its own rows into its trainer's outputs."""
        before = getattr(self._local, "ctx", None)
        self._local.ctx = ctx
        try:
            yield
        finally:
            self._local.ctx = before

    def result(self, future: futures.Future, server: int, op: str,
               timeout: Optional[float] = None) -> Reply:
        """The reply of :meth:`call_async` (its error raised)."""
        tree = self._tree()
        if tree is not None:
            tree.revise()
        self._serve_deferred()
        if getattr(future, "own_part", False):
            reply = future.result()
        else:
            reply = self._others.result(future, server, op, timeout)
        if tree is not None:
            tree.received(reply)
        return reply

    def _tree(self) -> Optional[_TreeCharge]:
        """The charge of the tree this thread samples, if it has one."""
        charge = running_charge()
        if charge is None:
            return None
        tree = getattr(self._local, "tree", None)
        if tree is None or tree.charge is not charge:  # a new tree on this thread
            tree = self._local.tree = _TreeCharge(charge)
        return tree

    def _deferred(self) -> list:
        calls = getattr(self._local, "calls", None)
        if calls is None:
            calls = self._local.calls = []
        return calls

    def _serve_deferred(self) -> None:
        """Serves this thread's own-part calls not served yet."""
        calls = self._deferred()
        while calls:
            future, handler, args, tensors, ctx = calls.pop(0)
            try:
                # Nothing else is lent in process: a handler's outputs are
                # ordinary tensors.
                result, out = handler(args, tensors, ctx or CallContext(None)) \
                    if wants_context(handler) else handler(args, tensors)
                future.set_result(Reply(result, list(out)))
            except Exception as exc:  # the caller sees it from result(), as a peer's
                future.set_exception(exc)

    def close(self, release_wait: float = RELEASE_WAIT_S) -> None:
        """Closes the peers' connections (``release_wait``: see
        :meth:`RpcClient.close <pyg_dist.rpc.client.RpcClient.close>`)."""
        self._others.close(release_wait)
