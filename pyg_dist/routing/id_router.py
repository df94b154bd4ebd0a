"""Route a batch of global node ids to the servers that own them.

:class:`Router` is the one place where the trainer side turns "these ids"
into "one request per owning server, all in flight at once": it splits ids
with the partition book of the ids' node type (:meth:`Router.split`), sends
every request concurrently and waits for every answer
(:meth:`Router.call_all`; re-sends and failover are the client's); callers
keep the positions of the ids each server got, to put the answers back into
their own order (:func:`reassemble`). The remote feature store, the remote
graph store and the distributed sampler all go through it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import InvalidPartitionArgumentError, StoreError
from pyg_dist.kernels.neighbor_sample import segment_positions
from pyg_dist.partitioning.type_keys import node_type_key
from pyg_dist.protocol.ops import OPS, declared
from pyg_dist.rpc.op_spec import PartRequest
from pyg_dist.rpc.wire_format import Reply

if TYPE_CHECKING:
    from pyg_dist.rpc.retrying import FirstAttempt, PartitionClient

logger = logging.getLogger(__name__)


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
    index = segment_positions((torch.cumsum(cnt, 0) - cnt).index_select(0, block_of),
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
            (used in the process that created it; an in-process stand-in in
            unit tests).
        replicas: Per part, its replica endpoints (``replicas[k][0]`` is
            ``endpoints[k]``): the client of every process fails over among
            them (:class:`~pyg_dist.rpc.retrying.RetryingClient`).
    """

    def __init__(self, endpoints: Sequence[str], book: Any, num_nodes: int,
                 config: Any = None, client: Optional[PartitionClient] = None,
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
        self._copied_rows = 0
        self._in_process: Optional[Callable[[PartitionClient], PartitionClient]] = None
        self.in_process_parts: tuple[int, ...] = ()
        """The parts served in this process (:meth:`serve_in_process`)."""

    def serve_in_process(self, wrap: Callable[[PartitionClient], PartitionClient],
                         parts: Sequence[int]) -> None:
        """Has every process's client wrapped by ``wrap`` (picklable): one that
        serves ``parts`` in this process and sends the rest on through the
        client it wraps (``pyg_dist.connect(colocate=True)``)."""
        with self._lock:
            self._in_process = wrap
            self.in_process_parts = tuple(parts)
            if self._client is not None:
                self._client = wrap(self._client)

    @property
    def num_parts(self) -> int:
        """Number of parts (and servers)."""
        return len(self.endpoints)

    @property
    def client(self) -> PartitionClient:
        """The RPC client of this process (created on first use after a fork)."""
        self._start_over_after_fork()
        with self._lock:
            if self._closed:
                raise StoreError("the remote store was closed; call pyg_dist.connect() again")
            if self._client is None:
                from pyg_dist.rpc.retrying import RetryingClient

                client = RetryingClient(self.replicas or self.endpoints, self.config, OPS)
                self._client = client if self._in_process is None else self._in_process(client)
            return self._client

    def close(self, release_wait: float = 2.0) -> None:
        """Closes the RPC client of this process (the servers unmap the
        output segments it lent them); later calls raise StoreError.

        Args:
            release_wait: Seconds to wait, all servers together, for them to
                take back the memory this process lent them; 0 sends the
                hand-back without waiting (a server stopping with its peers).
        """
        self._start_over_after_fork()
        with self._lock:
            client, self._client = self._client, None
            outputs, self._outputs = self._outputs, None
            self._closed = True
        if client is None:
            return
        if outputs:
            self._release_outputs(client, outputs.close(), release_wait)
        client.close(release_wait)

    def _release_outputs(self, client: PartitionClient, keys: dict[int, list],
                         wait: float) -> None:
        """Asks every server at once to unmap the output segments it holds
        (else each unmaps them at its bound, or once this process exits)."""
        sent = []
        for part, part_keys in keys.items():
            try:
                sent.append((part, client.call_async(part, "release", {"segments": part_keys},
                                                     timeout=2.0)))
            except Exception as exc:
                logger.debug("release of output segments on %s failed: %s",
                             self.endpoints[part], exc)
        if sent and wait > 0:
            futures.wait([future for _, future in sent], timeout=wait)
        for part, future in sent:
            if future.done() and future.exception(0) is not None:
                logger.debug("release of output segments on %s failed: %s",
                             self.endpoints[part], future.exception(0))

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

    @property
    def copied_rows(self) -> int:
        """Feature rows this process copied out of servers' replies into a
        batch (rows a same-host server wrote in place are not copied)."""
        return self._copied_rows

    def count_copied_rows(self, rows: int) -> None:
        """Adds ``rows`` to :attr:`copied_rows` (thread-safe)."""
        if rows:
            with self._lock:
                self._copied_rows += int(rows)

    def _start_over_after_fork(self) -> None:
        if self._pid != os.getpid():
            # After a fork the parent's client (and its I/O thread) is not
            # ours to use or close, and the lock may have been copied held
            # by a parent thread that does not exist here.
            self._lock = threading.Lock()
            self._client = None
            self._outputs = None  # the parent's segments are the parent's
            self._pid = os.getpid()

    def deadline(self, timeout: Optional[float]) -> float:
        """``timeout``, or the configuration's deadline when ``None``."""
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
        ids = self.as_ids(ids, what)
        if ids.numel():
            low, high = (int(v) for v in torch.aminmax(ids))
            if low < 0 or high >= num_nodes:
                of = "" if node_type is None else f" of node type {node_type!r}"
                raise StoreError(f"{what} holds ids outside [0, {num_nodes}){of}: min "
                                 f"{low}, max {high}; pass global node ids of the "
                                 f"partitioned graph")
        return ids

    @staticmethod
    def as_ids(ids: Tensor, what: str) -> Tensor:
        """``ids`` as int64 after the checks that need no pass over them.

        Raises:
            StoreError: if ``ids`` is not a 1-D integer tensor.
        """
        if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise StoreError(f"{what} must be a 1-D integer tensor of global node ids, "
                             f"got dtype {ids.dtype} and shape {tuple(ids.shape)}")
        return ids.to(torch.long)

    def split(self, ids: Tensor, node_type: Optional[str] = None
              ) -> list[tuple[int, Tensor, Tensor]]:
        """Groups ids (of ``node_type``) by owner:
        ``[(part, positions, ids[positions]), ...]``.

        Only parts owning at least one of the ids appear, ascending.
        """
        return self.book_of(node_type).split(ids)

    def split_checked(self, ids: Tensor, what: str, node_type: Optional[str] = None
                      ) -> list[tuple[int, Tensor, Tensor]]:
        """:meth:`check_ids` and :meth:`split` in one pass over the ids: the
        book's lookup of their parts is their range check.

        Raises:
            StoreError: as :meth:`check_ids`.
        """
        book = self.book_of(node_type)
        ids = self.as_ids(ids, what)
        try:
            return book.split(ids)
        except InvalidPartitionArgumentError:
            self.check_ids(ids, what, node_type)  # raises the error that names them
            raise

    def call_all(self, requests: Sequence[PartRequest], timeout: Optional[float] = None,
                 reply_bytes: Optional[Sequence[Optional[int]]] = None,
                 first: Optional[Sequence[Optional[FirstAttempt]]] = None) -> list[Reply]:
        """Issues several calls at once and waits for all of them.

        Re-sends, failover among replicas and back-off on busy servers are
        the client's (:class:`~pyg_dist.rpc.retrying.RetryingClient`: one
        policy for every caller), and so is the check of every reply
        against its op's declaration.

        Args:
            requests: The calls, built by :meth:`~pyg_dist.rpc.op_spec.OpSpec.request`
                (or ``(part, op, args, tensors)`` tuples, checked the same way).
            timeout: Deadline of every attempt; ``None`` uses the config's.
            reply_bytes: Bytes each reply's tensors take, for the RPC
                client to lend same-host servers memory for them (see
                :meth:`~pyg_dist.rpc.RpcClient.call_async`; release the
                replies once read). Re-sends travel over the socket.
            first: Per request, what its first attempt sends instead (its
                server writes the answer into the caller's memory:
                :class:`~pyg_dist.rpc.retrying.FirstAttempt`), or ``None``.

        Returns:
            The replies, in the order of ``requests``.
        """
        # A request built elsewhere as a plain tuple is held to its op's
        # declaration here: every call the trainer makes passes this point.
        requests = [r if isinstance(r, PartRequest) else declared(*r) for r in requests]
        deadline = self.deadline(timeout)
        client = self.client
        sizes = list(reply_bytes) if reply_bytes is not None else [None] * len(requests)
        firsts = list(first) if first is not None else [None] * len(requests)
        futures = [client.call_async(part, op, args, tensors, timeout=deadline,
                                     reply_bytes=size, first=attempt)
                   for (part, op, args, tensors), size, attempt in zip(requests, sizes, firsts)]
        return [client.result(future, request.part, request.op, deadline)
                for request, future in zip(requests, futures)]
