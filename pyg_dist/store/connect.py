"""``pyg_dist.connect``: the trainer's one call to reach a served graph.

``fs, gs = pyg_dist.connect(["tcp://10.0.0.5:5555", "tcp://10.0.0.6:5555"])``
asks every server for its ``meta`` at once, checks that together they serve
every part of one graph exactly once, orders them by part
(:func:`~pyg_dist.routing.servers.connect_router`), and builds the
:class:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore` and
:class:`~pyg_dist.store.remote_graph_store.RemoteGraphStore` sharing one set
of connections. Everything the trainer needs (sizes, feature names and
dtypes, the partition book) comes from the servers: no partition files on
the trainer. With no addresses, ``PYG_DIST_SERVERS`` (comma-separated, set by
``pyg-dist launch``) or the file ``PYG_DIST_SERVERS_FILE`` names is read
(:mod:`pyg_dist.discovery`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, Optional, Union

from pyg_dist.discovery import SERVERS_ENV
from pyg_dist.errors import ProtocolError, StoreError
from pyg_dist.malloc_tuning import tune_malloc as tune_process_malloc
from pyg_dist.protocol.ops import META
from pyg_dist.routing.id_router import Router
from pyg_dist.routing.servers import ServerMeta, connect_router
from pyg_dist.store.edge_fetch import EdgeFeatureFetcher
from pyg_dist.store.remote_feature_store import RemoteFeatureStore
from pyg_dist.store.remote_graph_store import RemoteGraphStore

logger = logging.getLogger(__name__)

__all__ = ["SERVERS_ENV", "build_stores", "connect"]


def connect(addresses: Union[Sequence[Union[str, Sequence[str]]], str, None] = None,
            config: Any = None, *,
            timeout: Optional[float] = None, tune_malloc: Optional[bool] = None,
            colocate: Union[bool, str, os.PathLike] = False
            ) -> tuple[RemoteFeatureStore, RemoteGraphStore]:
    """Connects to the partition servers of one graph.

    Args:
        addresses: Server endpoints (any order): ``tcp://host:port``,
            ``host:port`` (read as TCP) or ``ipc://path``, as a list or a
            comma-separated string, or ``None`` to read ``PYG_DIST_SERVERS``
            or else the file named by ``PYG_DIST_SERVERS_FILE``
            (:mod:`pyg_dist.discovery`). An entry may be a group of
            replicas of one part, as a list (``[["a:5555", "a2:5555"],
            "b:5555"]``) or joined by ``|`` (``"a:5555|a2:5555,b:5555"``),
            each checked to serve the same part of the same graph; reads
            fail over among them when one dies, in every process
            (``DataLoader`` workers included).
        config: An :class:`~pyg_dist.rpc.config.RpcConfig`; ``None`` uses the
            defaults and the environment.
        timeout: Deadline of the ``meta`` calls; ``None`` uses the config's
            ``connect_timeout``.
        tune_malloc: Whether to tune glibc's allocator in this process
            (:func:`pyg_dist.malloc_tuning.tune_malloc`): the feature rows of
            every batch then reuse heap memory instead of fresh pages, and
            threads started afterwards (the RPC client's, libzmq's) share one
            arena; freed memory stays with the process. ``None`` (default)
            tunes unless ``PYG_DIST_TUNE_MALLOC=0``; ``True`` or ``False``
            decide whatever the variable says.
        colocate: Serve the parts whose servers run on this host in this
            process (:mod:`pyg_dist.server.colocated`): their files are
            mapped (the servers' page cache, no copy) and their sampling and
            feature reads run on the calling thread, without a round trip;
            batches are the same. ``True`` maps the directory each such
            server names; a path maps that directory instead (a server in a
            container names its own path), which must hold the same graph.
            A trainer whose parts are all here samples hop by hop itself
            (``server_hops`` defaults to ``False``). The other parts, and
            the learnable embeddings (state on their servers), are asked
            over the socket. ``False`` (default): every part is.

    Returns:
        ``(feature_store, graph_store)``, ready for
        :class:`~pyg_dist.loader.DistNeighborLoader` or PyG's own loaders.
        Call ``feature_store.close()`` (or use it as a context manager) to
        close the connections of both.

    Raises:
        ServerListError: if no address is given, an address does not parse
            or repeats, or a replica list is empty (checked before anything
            connects).
        StoreError: if the servers do not serve each part of one graph
            exactly once, or a replica serves another part or graph.
        ServerUnavailableError: at once when a TCP server's host refuses
            the connection (nothing listens on that port) or its name does
            not resolve, naming the address.
        RpcError: if a server cannot be reached within the deadline.
        StoreError: with a ``colocate`` path that holds another graph or
            cannot be mapped.
    """
    # Every batch brings tens of MB of feature rows into fresh tensors; with
    # glibc's defaults each one is new pages from the kernel (about 15% of
    # the loader's throughput on 2 cores). Tuned before the client's threads
    # start, so that they share one arena. tune_malloc=False or
    # PYG_DIST_TUNE_MALLOC=0 opts out.
    if tune_process_malloc(tune_malloc):
        logger.debug("glibc malloc tuned for per-batch buffers")
    router, metas = connect_router(addresses, config, timeout)
    try:
        fs, gs = build_stores(router, metas)
        if colocate is not False:
            _colocate(router, metas, None if colocate is True else colocate)
        return fs, gs
    except BaseException:
        router.close()
        raise


def build_stores(router: Router, metas: list[ServerMeta]
                 ) -> tuple[RemoteFeatureStore, RemoteGraphStore]:
    """The store pair over a router to servers whose ``meta`` was checked.

    Args:
        router: Routes to part ``k``'s server (its replicas) by ``k``.
        metas: One per part, in part order
            (:func:`~pyg_dist.routing.servers.connect_router`).
    """
    first = metas[0]
    logger.info("connected to %d servers of a graph with %d nodes, %d edges",
                router.num_parts, first.num_nodes, first.num_edges)
    limits = [m.max_reply_bytes for m in metas]
    fs = RemoteFeatureStore(router, first.features, reply_limits=limits)
    gs = RemoteGraphStore(router, first.edge_types if first.is_hetero else first.num_edges,
                          limits)
    # What tells one graph from another (name and partition checksums):
    # state built from one store (a feature cache) is checked against it.
    fs.graph_id = gs.graph_id = first.graph
    gs.forwarding = all(m.result.get("forwarding") is True for m in metas)
    fs.server_hosts = [m.host for m in metas]
    try:
        fs.edge_features = EdgeFeatureFetcher.from_meta(router, [m.result for m in metas])
    except (KeyError, TypeError, ValueError, StoreError) as exc:
        raise ProtocolError(f"server {first.address} described its edge attributes in a form "
                            f"this version does not read ({exc})", address=first.address,
                            op=META.name) from exc
    return fs, gs


def _colocate(router: Router, metas: list[ServerMeta],
              root: Union[str, os.PathLike, None]) -> None:
    """Serves the same-host parts in this process (``connect(colocate=)``)."""
    from pyg_dist.server.colocated import colocate

    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise StoreError(f"colocate must be True, False or a dataset directory, "
                         f"got {type(root).__name__}")
    colocation = colocate(metas, root)
    if colocation is None:
        return
    router.serve_in_process(colocation, colocation.parts)
