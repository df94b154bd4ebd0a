"""``PartitionServer``: one part of a partitioned graph, served over ZeroMQ.

It opens the dataset with :class:`~pyg_dist.partitioning.PartitionReader`,
builds the part's PyG feature and graph stores through the plugin registry
(``memory``, ``mmap`` or a third party's), and serves the operations of
:mod:`pyg_dist.server.partition_ops` on a :class:`~pyg_dist.rpc.RpcServer`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar, Union

from pyg_dist.errors import (
    InvalidPartitionArgumentError,
    TransportError,
)
from pyg_dist.partitioning import PartitionReader
from pyg_dist.plugins import PluginRegistry, default_registry
from pyg_dist.protocol.ops import DEGREE, GET, GET_EDGES, PARTITION_OPS, SAMPLE, SAMPLE_TREE
from pyg_dist.rpc.config import RpcConfig, default_config
from pyg_dist.rpc.server import RpcServer
from pyg_dist.rpc.wire_values import error_text
from pyg_dist.server.embedding_checkpoint import EmbeddingCheckpoint
from pyg_dist.server.forwarding import HopForwarder, Peers
from pyg_dist.server.partition_ops import PartitionOps

logger = logging.getLogger(__name__)

T = TypeVar("T")


_READ_OPS = tuple(op.name for op in (SAMPLE, GET, GET_EDGES, DEGREE))
"""The ops that read a part's stores (``sample_tree`` always runs on a worker)."""


class PartitionServer:
    """Serves part ``part`` of the dataset at ``root``.

    Args:
        root: The partitioned dataset (directory holding ``meta.json``).
        part: The part to serve, in ``[0, num_parts)``.
        bind: ZeroMQ endpoint to bind; port ``0`` picks a free port
            (:attr:`endpoint` reports it).
        feature_store: Name of the feature-store plugin.
        graph_store: Name of the graph-store plugin.
        config: RPC limits and worker count; :func:`default_config` by default.
        registry: Plugin registry; :data:`pyg_dist.plugins.default_registry`
            by default.
        verify: Check file checksums against ``meta.json`` while loading.
        reader: An open reader of ``root`` to share (a
            :class:`~pyg_dist.server.group.ServerGroup` serving several parts
            opens one); by default one is opened for ``part`` alone, so only
            ``meta.json``, the books and ``part-K/`` need to exist.
        peers: The cluster's server list (as :func:`pyg_dist.connect` takes
            it), or a callable returning it on first use: with it the server
            carries a batch's hops among its peers (``sample_tree``,
            :mod:`pyg_dist.server.forwarding`). ``None``: it does not.
        read_only: Refuse every write (the embedding ops ``emb_create`` of a
            new table, ``emb_write``, ``emb_push``, ``emb_checkpoint``).
        embeddings_dir: Where the part's learnable embedding tables are
            checkpointed (``DIR/part-K/``) and loaded from on start;
            ``None``: they live in memory only.
        checkpoint_every: Seconds between checkpoints while tables change
            (with ``embeddings_dir``); ``0`` or ``None``: only on stop and
            when asked (``emb_checkpoint``).
        store_options: Extra keyword options for both store factories.

    Raises:
        PartitionFormatError: if the dataset is missing or malformed.
        InvalidPartitionArgumentError: if ``part`` is out of range.
        PluginNotFoundError: if a store plugin is not installed.
    """

    def __init__(self, root: Union[str, os.PathLike], part: int, *,
                 bind: str = "tcp://127.0.0.1:0", feature_store: str = "memory",
                 graph_store: str = "memory", config: Optional[RpcConfig] = None,
                 registry: Optional[PluginRegistry] = None, verify: bool = True,
                 reader: Optional[PartitionReader] = None, peers: Peers = None,
                 read_only: bool = False,
                 embeddings_dir: Optional[Union[str, os.PathLike]] = None,
                 checkpoint_every: Optional[float] = 60.0, **store_options: Any) -> None:
        if reader is None:
            if isinstance(part, bool) or not isinstance(part, int) or part < 0:
                raise InvalidPartitionArgumentError(
                    f"part must be an integer >= 0 for {root}; got {part!r}")
            reader = PartitionReader(root, verify=verify, parts=[part])
        self.reader = reader
        if isinstance(part, bool) or not isinstance(part, int) \
                or not 0 <= part < self.reader.num_parts:
            raise InvalidPartitionArgumentError(
                f"part must lie in [0, {self.reader.num_parts}) for {root}; got {part!r}")
        self.part = part
        registry = registry or default_registry
        fs = registry.feature_store(feature_store)(self.reader, part, **store_options)
        gs = registry.graph_store(graph_store)(self.reader, part, **store_options)
        self.config = config or default_config()
        self.ops = PartitionOps(self.reader, part, fs, gs, self.config.max_reply_bytes)
        self.ops.serve_with(self.config)
        self.forwarder = HopForwarder(self.ops, peers, self.config)
        self.ops.forward_with(self.forwarder)
        self.ops.embeddings.read_only = read_only
        self.checkpoint: Optional[EmbeddingCheckpoint] = None
        if embeddings_dir is not None:
            self.checkpoint = EmbeddingCheckpoint(self.ops.embeddings, embeddings_dir,
                                                  checkpoint_every)
            self.checkpoint.load()  # before serving: a restart resumes from it
            self.ops.embeddings.checkpointer = self.checkpoint.save
        # A small read is answered on the I/O thread, unless it may wait on
        # a disk: a page fault there would hold every client's requests.
        blocking = any(getattr(store, "reads_may_block", False) for store in (fs, gs))
        self._rpc = RpcServer(self.ops.handlers(), bind, self.config, name=f"part-{part}",
                              estimators={**self.ops.estimators(),
                                          SAMPLE_TREE.name: self.forwarder.estimate},
                              ops=PARTITION_OPS,
                              worker_ops=_READ_OPS if blocking else ())
        logger.info("loaded part %d of %s (%s feature store, %s graph store)", part, root,
                    feature_store, graph_store)

    @property
    def endpoint(self) -> str:
        """The bound endpoint (with the real port)."""
        return self._rpc.endpoint

    @property
    def failure(self) -> Optional[BaseException]:
        """What stopped the server on its own (a socket broke, a thread
        died), or ``None``."""
        return self._rpc.failure

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the server stopped; returns whether it has."""
        return self._rpc.wait(timeout)

    def start(self) -> str:
        """Starts serving in background threads; returns the endpoint."""
        endpoint = self._rpc.start()
        if self.checkpoint is not None and not self.ops.embeddings.read_only:
            self.checkpoint.start()
        return endpoint

    def stop(self, timeout: float = 5.0) -> None:
        """Stops serving and releases the sockets and client segments. Safe
        to call twice. With an embeddings directory, the tables are written
        there after the last request was served (a clean stop loses no
        update).

        Args:
            timeout: How long to wait for the server's threads, all together
                (see :meth:`RpcServer.stop <pyg_dist.rpc.server.RpcServer.stop>`).
        """
        self._rpc.stop(timeout)
        self.forwarder.close()
        if self.checkpoint is not None and not self.ops.embeddings.read_only:
            self.checkpoint.stop()

    def serve_forever(self, on_ready: Optional[Callable[[str], None]] = None) -> None:
        """Serves until SIGTERM or SIGINT (or :meth:`stop` from another
        thread), then stops cleanly (see :func:`serve_until_stopped`).

        Args:
            on_ready: Called with the endpoint once the server serves.

        Raises:
            TransportError: if the server stopped on its own (a socket broke,
                a thread died; see :attr:`RpcServer.failure`), after the
                clean stop, so that a launcher sees a failure (``pyg-dist
                serve`` exits non-zero), not a finished job.
        """
        failed = serve_until_stopped([self], self.start, on_ready, self.stop)
        if failed is not None:
            failure = failed.failure
            raise TransportError(f"part {self.part} on {self.endpoint} stopped serving: "
                                 f"{type(failure).__name__}: {error_text(failure, 500)} "
                                 f"(the log has the traceback); restart the server",
                                 address=self.endpoint) from failure

    def __enter__(self) -> PartitionServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_until_stopped(servers: Sequence[PartitionServer], start: Callable[[], T],
                        on_ready: Optional[Callable[[T], None]],
                        stop: Callable[[], None]) -> Optional[PartitionServer]:
    """Calls ``start`` (which starts ``servers``) and ``on_ready`` with what it
    returned (their endpoints), waits for SIGTERM or SIGINT or for a server to
    stop (on its own, or by :meth:`PartitionServer.stop` from another thread),
    then calls ``stop``.

    Signal handlers are installed (from the main thread only) before
    ``start``, so a signal right after a server is ready is never lost; the
    previous handlers are restored on return.

    Returns:
        The first server that stopped on its own (its ``failure`` is set), or
        ``None``.
    """
    signalled = threading.Event()
    previous = {}
    failed: Optional[PartitionServer] = None
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, frame: signalled.set())
    try:
        ready = start()
        if on_ready is not None:
            on_ready(ready)
        # A bounded wait keeps the main thread responsive to signals.
        while not signalled.wait(0.5) and not any(s.wait(0) for s in servers):
            pass
        failed = next((s for s in servers if s.failure is not None), None)
        if failed is None:
            logger.info("parts %s: stop requested", [s.part for s in servers])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop()
    return failed
