"""``ServerGroup``: several parts of one dataset served from one process.

A host that serves parts 0 and 1 runs ``pyg-dist serve ROOT --part 0,1``
instead of two commands: one :class:`PartitionReader` opened for those
parts (so only ``meta.json``, the books and their ``part-K/`` directories
need to exist on the host), one :class:`PartitionServer` per part, each on
its own endpoint. Trainers see separate servers, exactly as if every part
had a process of its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional, Union

from pyg_dist.errors import InvalidPartitionArgumentError, TransportError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.rpc.wire_values import error_text
from pyg_dist.server.partition_server import PartitionServer, serve_until_stopped

logger = logging.getLogger(__name__)


def group_endpoints(bind: str, count: int) -> list[str]:
    """The endpoint of each of ``count`` parts served from ``bind``.

    Port 0 gives every part a free port; port ``P`` gives them ``P``,
    ``P + 1``, ... in the order the parts were listed.

    Args:
        bind: ``tcp://HOST:PORT`` (normalised by the CLI).
        count: Number of parts.

    Raises:
        InvalidPartitionArgumentError: if the ports run past 65535.
    """
    head, _, port = bind.rpartition(":")
    first = int(port)
    if first == 0:
        return [bind] * count
    if first + count - 1 > 65535:
        raise InvalidPartitionArgumentError(
            f"{count} parts from port {first} need ports up to {first + count - 1}; pick "
            f"a port <= {65536 - count} or port 0 (any free)")
    return [f"{head}:{first + i}" for i in range(count)]


class ServerGroup:
    """Serves ``parts`` of the dataset at ``root``, one endpoint per part.

    Args:
        root: The partitioned dataset (directory holding ``meta.json``).
        parts: The parts to serve (distinct, in ``[0, num_parts)``).
        bind: ``tcp://HOST:PORT`` of the first part; see :func:`group_endpoints`.
        verify: Check file checksums against ``meta.json`` while loading.
        server_options: Keyword options for every :class:`PartitionServer`
            (``feature_store``, ``graph_store``, ``config``, ...).

    Raises:
        InvalidPartitionArgumentError: if ``parts`` is empty, repeats a part
            or names one out of range.
        PartitionFormatError: if the served parts' files are missing or
            malformed.
    """

    def __init__(self, root: Union[str, os.PathLike], parts: Sequence[int], *,
                 bind: str = "tcp://127.0.0.1:0", verify: bool = True,
                 **server_options: Any) -> None:
        parts = list(parts)
        if not parts:
            raise InvalidPartitionArgumentError("serve at least one part")
        if len(set(parts)) != len(parts):
            raise InvalidPartitionArgumentError(f"a part is listed twice in {parts}")
        reader = PartitionReader(root, verify=verify, parts=parts)
        self.servers: list[PartitionServer] = []
        try:
            for part, endpoint in zip(parts, group_endpoints(bind, len(parts))):
                self.servers.append(PartitionServer(root, part, bind=endpoint, reader=reader,
                                                    verify=verify, **server_options))
        except BaseException:
            self.stop()
            raise

    @property
    def endpoints(self) -> list[str]:
        """The bound endpoints, in the order of the parts."""
        return [server.endpoint for server in self.servers]

    def start(self) -> list[str]:
        """Starts every server; returns their endpoints."""
        try:
            return [server.start() for server in self.servers]
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 5.0) -> None:
        """Stops every server. Safe to call twice.

        Args:
            timeout: How long to wait for the servers' threads, all servers
                together.
        """
        deadline = time.monotonic() + timeout
        for server in self.servers:
            server.stop(max(0.0, deadline - time.monotonic()))

    def serve_forever(self, on_ready: Optional[Callable[[list[str]], None]] = None,
                      stop_timeout: float = 5.0) -> None:
        """Serves until SIGTERM or SIGINT, or until one server fails, then
        stops them all.

        Args:
            on_ready: Called with the endpoints once every server serves.
            stop_timeout: How long the stop waits for operations in flight
                (see :meth:`stop`); a process that exits right after may
                give a short one.

        Raises:
            TransportError: if a server stopped on its own (after every
                server was stopped), naming its part and endpoint.
        """
        failed = serve_until_stopped(self.servers, self.start, on_ready,
                                     lambda: self.stop(stop_timeout))
        if failed is not None:
            failure = failed.failure
            raise TransportError(
                f"part {failed.part} on {failed.endpoint} stopped serving: "
                f"{type(failure).__name__}: {error_text(failure, 500)} (the log has the "
                f"traceback); the other parts of this process were stopped with it; restart "
                f"the command", address=failed.endpoint) from failure

    def __enter__(self) -> ServerGroup:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
