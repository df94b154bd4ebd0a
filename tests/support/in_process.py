"""The stores and the sampler over partition handlers in this process.

:class:`InProcessClient` stands where :class:`~pyg_dist.rpc.retrying.
RetryingClient` stands (the :class:`~pyg_dist.rpc.retrying.PartitionClient`
protocol): every call is encoded as on the wire, served by the server's own
:class:`~pyg_dist.rpc.dispatch.Dispatch` (request checked against its op's
declaration, the real :class:`~pyg_dist.server.partition_ops.PartitionOps` handler
over real partition files, error replies), decoded, and its reply checked
as the retry layer checks it. Only the sockets and threads are missing, so
unit tests of the stores and the sampler run in milliseconds and fail where
the logic is wrong, not where a process was slow. The transport itself is
tested on real sockets (``tests/rpc``) and end to end (``tests/loader``,
``tests/e2e``).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Sequence
from concurrent import futures
from typing import Any, Optional

from torch import Tensor

from pyg_dist.errors import RemoteError, remote_error
from pyg_dist.protocol.ops import META, OPS, PARTITION_OPS
from pyg_dist.routing.servers import parse_meta, router_over
from pyg_dist.rpc import RpcConfig, wire_format
from pyg_dist.rpc.dispatch import Dispatch
from pyg_dist.rpc.retrying import FirstAttempt
from pyg_dist.rpc.shm.serving import SegmentService
from pyg_dist.rpc.wire_format import ErrorReply, Reply
from pyg_dist.server import PartitionServer
from pyg_dist.store.connect import build_stores


class InProcessClient:
    """Calls the handlers of in-process partition servers directly.

    Args:
        ops: Per part, its :class:`~pyg_dist.server.partition_ops.PartitionOps`.
        config: Reported as the client's configuration.
    """

    def __init__(self, ops: Sequence[Any], config: Optional[RpcConfig] = None) -> None:
        self._config = config or RpcConfig()
        self._servers = [Dispatch(o.handlers(), PARTITION_OPS, SegmentService(), f"part-{p}",
                                  self._config.max_message_bytes) for p, o in enumerate(ops)]
        self._ids = itertools.count(1)
        self.calls: collections.Counter = collections.Counter()  # (part, op) -> calls
        self.closed = False

    @property
    def config(self) -> RpcConfig:
        return self._config

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(f"inproc://part-{p}" for p in range(len(self._servers)))

    def call_async(self, server: int, op: str, args: Optional[dict[str, Any]] = None,
                   tensors: Sequence[Tensor] = (), timeout: Optional[float] = None, *,
                   reply_bytes: Optional[int] = None,
                   first: Optional[FirstAttempt] = None) -> futures.Future:
        if first is not None:  # nothing is lent in process: the plain request
            first.given_up(True)
        future: futures.Future = futures.Future()
        args = {} if args is None else args
        self.calls[(server, op)] += 1
        try:
            future.set_result(self._serve(server, op, args, list(tensors)))
        except RemoteError as exc:
            future.set_exception(exc)
        return future

    def _serve(self, server: int, op: str, args: dict[str, Any], tensors: list[Tensor]
               ) -> Reply:
        address = self.endpoints[server]
        frames = wire_format.encode_request(next(self._ids), op, args, tensors)
        # bytes, as they would arrive: the reply must not alias the request.
        reply_frames = self._servers[server].handle([bytes(f) for f in frames])
        _, reply = wire_format.decode_reply([bytes(f) for f in reply_frames])
        if isinstance(reply, ErrorReply):
            raise remote_error(reply.type, reply.message, address=address, op=op)
        return OPS[op].check_reply(reply, args, tensors, address)

    def result(self, future: futures.Future, server: int, op: str,
               timeout: Optional[float] = None) -> Reply:
        return future.result(0)

    def close(self, release_wait: float = 0.0) -> None:
        self.closed = True


def in_process_stores(root: Any, num_parts: int) -> tuple[Any, Any, InProcessClient]:
    """``(feature_store, graph_store, client)`` over the parts of ``root``,
    served by handlers in this process."""
    ops = [PartitionServer(root, part).ops for part in range(num_parts)]
    client = InProcessClient(ops)
    metas = [parse_meta(client.endpoints[p], client.call_async(*META.request(p)).result())
             for p in range(num_parts)]
    fs, gs = build_stores(router_over(metas, list(client.endpoints), client.config, client),
                          metas)
    return fs, gs, client
