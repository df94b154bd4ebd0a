"""Route a batch of global node ids to the servers that own them.

:class:`Router` is the one place where the trainer side turns "these ids"
into "one request per owning server, all in flight at once": it splits ids
with the partition book of the ids' node type (:meth:`Router.split`), sends
every request concurrently and waits for every answer within the call's
deadline (:meth:`Router.call_all`); callers keep the positions of the ids
each server got, to put the answers back into their own order
(:func:`reassemble`). The remote feature store, the remote
graph store and the distributed sampler all go through it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import RemoteError, RpcError, RpcTimeoutError, StoreError, TransportError
from pyg_dist.partitioning.type_keys import node_type_key

logger = logging.getLogger(__name__)

# Grace on top of an RPC deadline before a wait on its future gives up: the
# client completes every future at its deadline, this only guards against a
# future that is never completed at all.
_WAIT_GRACE_S = 5.0


def _exclusive_cumsum(counts: Tensor) -> Tensor:
    out = torch.zeros_like(counts)
    if counts.numel() > 1:
        torch.cumsum(counts[:-1], dim=0, out=out[1:])
    return out


def segment_gather_index(starts: Tensor, counts: Tensor) -> Tensor:
    """Index that concatenates the segments ``[starts[i], starts[i] + counts[i])``.

    Args:
        starts: Start offset of every segment (int64).
        counts: Length of every segment (int64, non-negative).

    Returns:
        An int64 tensor of length ``counts.sum()``.
    """
    total = int(counts.sum())
    if total == 0:
        return torch.empty(0, dtype=torch.long)
    # Position of each output element inside its own segment, plus the start
    # of that segment in the source: arange(total) - offset + start, with
    # one repeat_interleave of (start - offset) rather than one of each.
    shift = starts - _exclusive_cumsum(counts)
    return torch.arange(total).add_(shift.repeat_interleave(counts, output_size=total))


def reassemble(
    num_seeds: int,
    positions: Sequence[Tensor],
    counts: Sequence[Tensor],
    values: Sequence[Sequence[Tensor]],
) -> tuple[Tensor, list[Tensor]]:
    """Merges per-server neighbour lists back into the frontier's order.

    Server ``p`` was asked for the seeds at ``positions[p]`` of the frontier
    and answered, for each of them in that order, ``counts[p][i]`` entries
    laid out contiguously in every tensor of ``values[p]`` (neighbour ids,
    edge ids, ...).

    Args:
        num_seeds: Length of the frontier; the positions of all servers
            together must be a permutation of ``range(num_seeds)``.
        positions: Per server, the frontier positions of the seeds it got.
        counts: Per server, the number of entries per seed.
        values: Per server, the tensors holding the entries (all of the same
            length, ``counts[p].sum()``).

    Returns:
        ``(counts, values)`` in frontier order: ``counts[j]`` entries for
        frontier seed ``j``, laid out contiguously, seed after seed.
    """
    if len(positions) == 1:
        # One owner: its answer is already in frontier order when it got the
        # whole frontier in order (the common case for a single part).
        pos = positions[0]
        if pos.numel() == num_seeds and bool((pos == torch.arange(num_seeds)).all()):
            return counts[0], list(values[0])
    pos = torch.cat(list(positions)) if positions else torch.empty(0, dtype=torch.long)
    cnt = torch.cat(list(counts)) if counts else torch.empty(0, dtype=torch.long)
    num_values = len(values[0]) if values else 0
    cat_values = [torch.cat([v[i] for v in values]) for i in range(num_values)]
    # block_of[j] = index of the answered block that belongs to seed j.
    block_of = torch.empty(num_seeds, dtype=torch.long)
    block_of.index_copy_(0, pos, torch.arange(pos.numel()))
    ordered_counts = cnt.index_select(0, block_of)
    index = segment_gather_index(_exclusive_cumsum(cnt).index_select(0, block_of),
                                 ordered_counts)
    return ordered_counts, [v.index_select(0, index) for v in cat_values]


class Router:
    """Sends per-owner shares of an id batch to partition servers concurrently.

    The RPC client is created lazily and again in every new process, so that
    a store or sampler copied into a forked ``DataLoader`` worker gets its own
    sockets instead of sharing (and corrupting) the parent's.

    Args:
        endpoints: Server endpoints ordered by part: ``endpoints[k]`` serves
            part ``k``.
        book: The partition book (maps a global node id to its part), or
            for a heterogeneous graph ``{node_type: book}`` (ids are numbered
            per node type).
        num_nodes: Number of nodes of the whole graph (all types together).
        config: The :class:`~pyg_dist.rpc.config.RpcConfig`; ``None`` uses the
            defaults and environment.
        client: An already connected client whose server ``k`` is part ``k``
            (used in the process that created it).
        replicas: Per part, its replica endpoints (``replicas[k][0]`` is
            ``endpoints[k]``); the client of every process is then a
            :class:`~pyg_dist.rpc.replicas.FailoverClient`.
    """

    def __init__(self, endpoints: Sequence[str], book: Any, num_nodes: int,
                 config: Any = None, client: Any = None,
                 replicas: Optional[Sequence[Sequence[str]]] = None) -> None:
        self.endpoints = list(endpoints)
        self.replicas = [list(g) for g in replicas] if replicas else None
        # One book per node type; a homogeneous graph has the one type None.
        self.books: dict[Optional[str], Any] = dict(book) if isinstance(book, dict) \
            else {None: book}
        self.book = self.books.get(None)
        self.num_nodes = int(num_nodes)
        self.config = config
        self._client = client
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False
        self._outputs: Any = None  # this process's OutputPool, once asked for

    @property
    def num_parts(self) -> int:
        """Number of parts (and servers)."""
        return len(self.endpoints)

    @property
    def client(self) -> Any:
        """The RPC client of this process (created on first use after a fork)."""
        self._start_over_after_fork()
        with self._lock:
            if self._closed:
                raise StoreError("the remote store was closed; call pyg_dist.connect() again")
            if self._client is None:
                from pyg_dist.rpc.client import RpcClient
                from pyg_dist.rpc.replicas import FailoverClient

                self._client = FailoverClient(self.replicas, self.config) if self.replicas \
                    else RpcClient(self.endpoints, self.config)
            return self._client

    def close(self) -> None:
        """Closes the RPC client of this process (the servers unmap the
        output segments it lent them); later calls raise StoreError."""
        self._start_over_after_fork()
        with self._lock:
            client, self._client = self._client, None
            outputs, self._outputs = self._outputs, None
            self._closed = True
        if client is None:
            return
        if outputs:
            for part, keys in outputs.close().items():
                try:  # else each server unmaps them at its bound, or when we exit
                    client.call(part, "release", {"segments": keys}, timeout=2.0)
                except Exception as exc:
                    logger.debug("release of %d output segments on %s failed: %s",
                                 len(keys), self.endpoints[part], exc)
        client.close()

    def output_pool(self, parts: Sequence[int]) -> Any:
        """This process's :class:`~pyg_dist.rpc.shm.outputs.OutputPool` for
        the servers ``parts`` (those on this host), made on first use; ``None``
        where none can be lent (no such server, shared memory off, or
        replicas, which may answer from another host)."""
        self._start_over_after_fork()
        with self._lock:
            if self._outputs is not None or self._closed:
                return self._outputs or None
        limit = 0 if self.replicas or not parts else \
            int(self.client.config.shared_memory_bytes) * len(parts)
        if limit <= 0:
            self._outputs = False
            return None
        from pyg_dist.rpc.shm.outputs import OutputPool

        with self._lock:
            if self._outputs is None:
                self._outputs = OutputPool(limit, parts)
            return self._outputs or None

    def send_once(self, requests: Sequence[tuple[int, str, dict, list[Tensor]]],
                  timeout: Optional[float] = None) -> list[Any]:
        """Sends calls that must not be sent twice (they write into memory the
        caller lent) and returns their futures, for :meth:`wait_once`."""
        deadline, client = self._timeout(timeout), self.client
        return [client.call_async(part, op, args, tensors, timeout=deadline)
                for part, op, args, tensors in requests]

    def wait_once(self, requests: Sequence[tuple[int, str, dict, list[Tensor]]],
                  futures: Sequence[Any], timeout: Optional[float] = None) -> list[Any]:
        """The reply of each call :meth:`send_once` sent, or the exception it
        failed with (a busy server is asked again, as in :meth:`call_all`:
        it refused before doing anything)."""
        deadline, client = self._timeout(timeout), self.client
        out: list[Any] = []
        for request, future in zip(requests, futures):
            try:
                out.append(self._wait_while_busy(client, request, future, deadline))
            except Exception as exc:
                out.append(exc)
        return out

    def _start_over_after_fork(self) -> None:
        if self._pid != os.getpid():
            # After a fork the parent's client (and its I/O thread) is not
            # ours to use or close, and the lock may have been copied held
            # by a parent thread that does not exist here.
            self._lock = threading.Lock()
            self._client = None
            self._outputs = None  # the parent's segments are the parent's
            self._pid = os.getpid()

    def _timeout(self, timeout: Optional[float]) -> float:
        if timeout is not None:
            return float(timeout)
        cfg = self.config if self.config is not None else self.client.config
        return float(cfg.timeout)

    @property
    def is_hetero(self) -> bool:
        """Whether node ids are numbered per node type (a ``HeteroData``)."""
        return None not in self.books

    def book_of(self, node_type: Optional[str]) -> Any:
        """The partition book of ``node_type`` (``None``: homogeneous).

        Raises:
            UnknownTypeError: if the graph has no such node type.
            GraphKindMismatchError: for a type on a homogeneous graph, or
                ``None`` on a heterogeneous one.
        """
        book = self.books.get(node_type)
        if book is None:
            node_type_key(node_type, list(self.books), "the served graph")
        return book

    def num_nodes_of(self, node_type: Optional[str]) -> int:
        """Nodes of one node type (``None``: every node of a homogeneous graph)."""
        return self.book_of(node_type).num_nodes

    def check_ids(self, ids: Tensor, what: str, node_type: Optional[str] = None) -> Tensor:
        """Validates global node ids before they are sent anywhere.

        Args:
            ids: The ids (any integer dtype, 1-D).
            what: Names the ids in the error message.
            node_type: The ids' node type (``None``: homogeneous graph).

        Raises:
            StoreError: if ``ids`` is not 1-D integer or out of range.
            UnknownTypeError, GraphKindMismatchError: see :meth:`book_of`.
        """
        num_nodes = self.num_nodes_of(node_type)
        if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise StoreError(f"{what} must be a 1-D integer tensor of global node ids, "
                             f"got dtype {ids.dtype} and shape {tuple(ids.shape)}")
        ids = ids.to(torch.long)
        if ids.numel():
            low, high = (int(v) for v in torch.aminmax(ids))
            if low < 0 or high >= num_nodes:
                of = "" if node_type is None else f" of node type {node_type!r}"
                raise StoreError(f"{what} holds ids outside [0, {num_nodes}){of}: min "
                                 f"{low}, max {high}; pass global node ids of the "
                                 f"partitioned graph")
        return ids

    def split(self, ids: Tensor, node_type: Optional[str] = None
              ) -> list[tuple[int, Tensor, Tensor]]:
        """Groups ids (of ``node_type``) by owner:
        ``[(part, positions, ids[positions]), ...]``.

        Only parts owning at least one of the ids appear, ascending.
        """
        return self.book_of(node_type).split(ids)

    def call_all(self, requests: Sequence[tuple[int, str, dict, list[Tensor]]],
                 timeout: Optional[float] = None, retry: bool = True,
                 reply_bytes: Optional[Sequence[int]] = None) -> list[Any]:
        """Issues several calls at once and waits for all of them.

        Every operation the trainer routes (``meta``, ``sample`` with an
        explicit seed, ``get``, ``edge_index``) is an idempotent read, so a
        call that timed out or hit a transport failure is re-sent up to
        ``config.retries`` times, with the config's exponential backoff
        (``retries=0``, the default, keeps every call within one deadline).

        Args:
            requests: ``(part, op, args, tensors)`` per call.
            timeout: Deadline of every attempt; ``None`` uses the config's.
            retry: ``False`` makes one attempt whatever the config says: for
                a request whose late first attempt must not run after its
                answer was used (one that writes into the caller's memory).
            reply_bytes: Bytes each reply's tensors take, for the RPC
                client to lend same-host servers memory for them (see
                :meth:`~pyg_dist.rpc.RpcClient.call_async`; release the
                replies once read). Re-sends travel over the socket.

        Returns:
            The replies, in the order of ``requests``.
        """
        deadline = self._timeout(timeout)
        client = self.client
        sizes = list(reply_bytes) if reply_bytes is not None else [None] * len(requests)
        futures = [client.call_async(part, op, args, tensors, timeout=deadline, reply_bytes=size)
                   for (part, op, args, tensors), size in zip(requests, sizes)]
        replies = []
        for request, future in zip(requests, futures):
            if retry:
                replies.append(self._wait_retrying(client, request, future, deadline))
            else:
                replies.append(self._wait_while_busy(client, request, future, deadline))
        return replies

    def _wait_retrying(self, client: Any, request: tuple[int, str, dict, list[Tensor]],
                       future: Any, deadline: float) -> Any:
        part, op, args, tensors = request
        cfg = client.config
        backoff = cfg.retry_backoff
        for attempt in range(cfg.retries + 1):
            if attempt:
                time.sleep(backoff)
                backoff = min(2 * backoff, cfg.retry_backoff_max)
                future = client.call_async(part, op, args, tensors, timeout=deadline)
            try:
                return self._wait_while_busy(client, request, future, deadline)
            except (RpcTimeoutError, TransportError) as exc:
                if attempt == cfg.retries:
                    raise
                logger.info("retrying %r on %s (attempt %d of %d) after: %s", op,
                            self.endpoints[part], attempt + 2, cfg.retries + 1, exc)
        raise RpcTimeoutError("unreachable", op=op)  # the loop returns or raises

    def _wait_while_busy(self, client: Any, request: tuple[int, str, dict, list[Tensor]],
                         future: Any, deadline: float) -> Any:
        """Waits for ``future``; a server that refused it as busy (its reply
        byte budget was spent by answers still in flight) is asked again
        after a pause, until the call's deadline has passed.

        A busy refusal comes before anything is computed (nothing was written
        into memory the request lent), so asking again is always safe; it is
        back-pressure, not a failure, and is not counted as a retry.
        """
        part, op, args, tensors = request
        cfg = client.config
        give_up = time.monotonic() + deadline
        pause = cfg.retry_backoff or 0.01
        while True:
            try:
                return self._wait(future, part, op, deadline)
            except RemoteError as exc:
                left = give_up - time.monotonic()
                if exc.remote_type != "ServerBusyError" or left <= pause:
                    raise
                logger.debug("%s is busy with %r; asking again in %.3gs",
                             self.endpoints[part], op, pause)
            time.sleep(pause)
            pause = min(2 * pause, max(cfg.retry_backoff_max, pause))
            future = client.call_async(part, op, args, tensors,
                                       timeout=max(give_up - time.monotonic(), 0.001))

    def _wait(self, future: Any, part: int, op: str, deadline: float) -> Any:
        try:
            return future.result(timeout=deadline + _WAIT_GRACE_S)
        except RpcError:
            # The client's own error names the deadline it kept; an
            # RpcTimeoutError is a TimeoutError, so it must not reach the
            # clause below and be re-worded.
            raise
        except concurrent.futures.TimeoutError as exc:
            raise RpcTimeoutError(
                f"no reply to {op!r} from {self.endpoints[part]} within its {deadline:.3g}s "
                f"deadline, and the RPC client did not fail the call either within "
                f"{_WAIT_GRACE_S:.3g}s more (its I/O thread is stuck)",
                address=self.endpoints[part], op=op) from exc
