"""Failover between replicas: several servers for one part (prototype).

:class:`FailoverClient` looks like an :class:`~pyg_dist.rpc.client.RpcClient`
to its callers (``call_async(server, op, ...)``, ``config``, ``close``), but
its "server ``k``" is a *group* of endpoints serving the same part. A call
goes to the group's preferred replica; if that one times out or cannot be
reached and the op is an idempotent read, the call is sent again to the next
replica of the group, and the failed replica moves to the back of the
group's order, so later calls go straight to a live one. A remote error
(the server answered, with a refusal) is never retried: another replica
would refuse the same way.

Each attempt has the full deadline; a replica that died, froze or became
unreachable fails its calls before it (``ServerUnavailableError``, see
:mod:`pyg_dist.rpc.liveness`), so they move on to the next replica within
seconds, while a slow one is waited for. A call fails only after every
replica of its group failed (at most ``replicas x timeout``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent import futures
from typing import Any, Optional, Union

from torch import Tensor

from pyg_dist.errors import RpcError, RpcTimeoutError, TransportError
from pyg_dist.rpc.client import RpcClient
from pyg_dist.rpc.config import RpcConfig

logger = logging.getLogger(__name__)

IDEMPOTENT_OPS = frozenset({"ping", "meta", "sample", "sample_types", "get", "get_types",
                            "sizes",
                            "edge_index",
                            "degree", "stats", "get_edges", "edge_ids"})
"""Operations that only read, so re-sending them to another replica is safe."""

Replicas = Sequence[Union[str, Sequence[str]]]


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


class FailoverClient:
    """An RPC client over groups of replicas, failing over within a group.

    Args:
        replicas: Per server index, one endpoint or a list of replica
            endpoints serving the same thing.
        config: Deadlines and limits (shared by every replica).
    """

    def __init__(self, replicas: Replicas, config: Optional[RpcConfig] = None) -> None:
        self.groups = replica_groups(replicas)
        flat = [e for g in self.groups for e in g]
        self._client = RpcClient(flat, config)
        index = iter(range(len(flat)))
        self._order = [[next(index) for _ in g] for g in self.groups]
        self._lock = threading.Lock()
        # Re-sends are issued here, never in a done-callback: that runs with
        # the client's I/O lock held and must not block on an in-flight slot.
        self._resend = futures.ThreadPoolExecutor(2, thread_name_prefix="pyg-dist-failover")

    @property
    def config(self) -> RpcConfig:
        """The shared configuration."""
        return self._client.config

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The currently preferred endpoint of every group."""
        with self._lock:
            return tuple(self._client.endpoints[order[0]] for order in self._order)

    def call_async(self, server: int, op: str, args: Optional[dict[str, Any]] = None,
                   tensors: Sequence[Tensor] = (), timeout: Optional[float] = None,
                   idempotent: bool = False, *, reply_bytes: Optional[int] = None
                   ) -> futures.Future:
        """Like :meth:`RpcClient.call_async`, with failover inside group
        ``server`` for idempotent ops.

        Args:
            server: Index of the replica group.
            op: Operation name.
            args: msgpack-native arguments.
            tensors: Tensors sent as raw frames (not modified until done).
            timeout: Deadline of each attempt; ``config.timeout`` by default.
            idempotent: Allow failover for an op outside
                :data:`IDEMPOTENT_OPS` (the listed ones always may).
            reply_bytes: See :meth:`RpcClient.call_async`.
        """
        if not 0 <= server < len(self.groups):
            raise RpcError(f"server index {server} is out of range; this client knows "
                           f"{len(self.groups)} replica groups", op=op)
        with self._lock:
            candidates = list(self._order[server])
        if not idempotent and op not in IDEMPOTENT_OPS:
            candidates = candidates[:1]
        outer: futures.Future = futures.Future()
        outer.set_running_or_notify_cancel()
        self._attempt(outer, server, candidates, 0, (op, args, tensors, timeout, reply_bytes))
        return outer

    def _attempt(self, outer: futures.Future, server: int, candidates: list[int], i: int,
                 call: tuple) -> None:
        op, args, tensors, timeout, reply_bytes = call
        try:
            inner = self._client.call_async(candidates[i], op, args, tensors, timeout,
                                            reply_bytes=reply_bytes)
        except RpcError as exc:
            self._failed(outer, server, candidates, i, call, exc)
            return
        inner.add_done_callback(
            lambda f: self._done(f, outer, server, candidates, i, call))

    def _done(self, inner: futures.Future, outer: futures.Future, server: int,
              candidates: list[int], i: int, call: tuple) -> None:
        exc = inner.exception()
        if exc is None:
            outer.set_result(inner.result())
        else:
            self._failed(outer, server, candidates, i, call, exc)

    def _failed(self, outer: futures.Future, server: int, candidates: list[int], i: int,
                call: tuple, exc: BaseException) -> None:
        retryable = isinstance(exc, (RpcTimeoutError, TransportError))
        if not retryable or i + 1 >= len(candidates):
            outer.set_exception(exc)
            return
        failed = candidates[i]
        with self._lock:
            order = self._order[server]
            if order[0] == failed:  # demote it once, not once per call
                order.append(order.pop(0))
        logger.warning("replica %s failed (%s); failing over to %s",
                       self._client.endpoints[failed], type(exc).__name__,
                       self._client.endpoints[candidates[i + 1]])
        try:
            self._resend.submit(self._attempt, outer, server, candidates, i + 1, call)
        except RuntimeError:  # closed meanwhile
            outer.set_exception(exc)

    def close(self) -> None:
        """Stops re-sending and closes every connection."""
        self._resend.shutdown(wait=True)
        self._client.close()

    def __enter__(self) -> FailoverClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
