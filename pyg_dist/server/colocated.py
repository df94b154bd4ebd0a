"""Parts whose files lie on the trainer's host, served in the trainer's process.

A batch sampled on servers costs round trips: on one host, every one of them
is a hand-off among processes and threads (about 150 us of CPU for a bare
``ping``, more with a request's checks), and on a sparse graph they are most
of a batch's cost (docs/performance.md, issue 30). A trainer on the same host
as some servers can skip them: with ``pyg_dist.connect(colocate=True)`` it
maps the files of the parts served on its host (the ``mmap`` stores, so the
pages are the ones the servers read: nothing is copied into the trainer) and
answers their read ops itself, on the calling thread, with the handlers a
server runs (:class:`~pyg_dist.server.partition_ops.PartitionOps`), so a
batch is the same either way. Everything else still goes to the servers: the
other hosts' parts, and every op that holds state (the learnable embeddings
live on their servers and change while training).

A part is mapped only when its server says it serves it from this host
(``meta``'s ``host``, :func:`~pyg_dist.rpc.shm.host_id`) and the directory
it names (``meta``'s ``root``, or the one the caller gives) holds the same
partitioned graph (``meta``'s ``graph``: its name and its files' checksums);
otherwise that part is asked over the socket, and the log says why.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from pyg_dist.errors import PartitionFormatError, PluginNotFoundError, StoreError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.plugins import default_registry
from pyg_dist.protocol import ops
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.shm import host_id
from pyg_dist.rpc.wire_values import describe
from pyg_dist.server.own_part import OwnPartFirst
from pyg_dist.server.partition_ops import PartitionOps

logger = logging.getLogger(__name__)

READ_OPS = tuple(op.name for op in (ops.SAMPLE, ops.GET, ops.SIZES, ops.EDGE_INDEX,
                                    ops.DEGREE, ops.GET_EDGES, ops.EDGE_IDS))
"""The ops a colocated part answers in the trainer's process: those that
only read the part's files. ``sample_tree`` is not among them (a trainer
whose parts are all here runs the hop loop itself), nor are ``meta``,
``stats`` (a server's own counters) and the embedding ops (state held by the
server)."""

_MAX_ROOT = 4096  # characters of a path a server may name (PATH_MAX)


class Colocation:
    """The parts this process serves itself, from one dataset directory.

    Picklable and fork-safe: each process maps the files again on its first
    call (a ``DataLoader`` worker gets its own stores).

    Args:
        root: The partitioned dataset's directory.
        parts: The parts to serve here.
        max_reply_bytes: Per part, the reply limit its server announced (a
            colocated part refuses what its server would).
    """

    def __init__(self, root: Union[str, os.PathLike], parts: Sequence[int],
                 max_reply_bytes: Mapping[int, int]) -> None:
        self.root = Path(root)
        self.parts = tuple(sorted(int(p) for p in parts))
        self.max_reply_bytes = dict(max_reply_bytes)
        self._ops: dict[int, PartitionOps] = {}
        self._pid = -1
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "parts": self.parts, "max_reply_bytes": self.max_reply_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"], state["parts"], state["max_reply_bytes"])  # type: ignore[misc]

    def open(self) -> dict[int, PartitionOps]:
        """This process's ops over the mapped parts, opened on first use.

        Raises:
            PartitionFormatError, PluginNotFoundError: if the files cannot
                be opened or mapped (see :func:`colocate`, which checks
                this once before any call is served here).
        """
        with self._lock:
            if self._pid != os.getpid():
                self._ops = open_parts(self.root, self.parts, self.max_reply_bytes)
                self._pid = os.getpid()
            return self._ops

    def __call__(self, client: Any) -> OwnPartFirst:
        """``client`` with the colocated parts' read ops served here."""
        handlers = {}
        for part, part_ops in self.open().items():
            every = part_ops.handlers()
            handlers[part] = {name: every[name] for name in READ_OPS}
        return OwnPartFirst(handlers, client)


def open_parts(root: Path, parts: Sequence[int],
               max_reply_bytes: Mapping[int, int]) -> dict[int, PartitionOps]:
    """The ops of ``parts`` of the dataset at ``root``, over its mapped files.

    The files are not checksummed again: their server did so when it
    loaded them, and the ``mmap`` stores refuse files that anyone but their
    owner may change.
    """
    reader = PartitionReader(root, verify=False, parts=parts)
    features = default_registry.feature_store("mmap")
    graph = default_registry.graph_store("mmap")
    return {p: PartitionOps(reader, p, features(reader, p), graph(reader, p),
                            max_reply_bytes[p]) for p in parts}


def colocate(metas: Sequence[Any], root: Union[str, os.PathLike, None] = None
             ) -> Optional[Colocation]:
    """The parts of ``metas`` this process can serve itself, mapped once to
    check them, or ``None`` if there is none.

    Args:
        metas: One :class:`~pyg_dist.routing.servers.ServerMeta` per part, in
            part order, as :func:`~pyg_dist.routing.servers.connect_router`
            checked them.
        root: The dataset directory to map; ``None`` maps the one each
            same-host server names (a server in a container may name a path
            the trainer sees elsewhere: give it then).

    Raises:
        StoreError: if ``root`` was given and holds another graph than the
            servers serve, or cannot be opened.
    """
    here = host_id()
    by_root: dict[Path, list[int]] = {}
    for meta in metas:
        if meta.host != here:
            continue
        named = meta.result.get("root") if root is None else os.fspath(root)
        if root is None and (not isinstance(named, str) or not 0 < len(named) <= _MAX_ROOT
                             or "\0" in named or not os.path.isabs(named)):
            # Its own path, absolute: anything else is not where it reads.
            logger.info("colocate: server %s of part %d names no absolute dataset "
                        "directory (%s); its part is asked over the socket", meta.address,
                        meta.part, describe(named))
            continue
        by_root.setdefault(Path(named), []).append(meta.part)
    if not by_root:
        logger.info("colocate: no server runs on this host; every part is asked over "
                    "the socket")
        return None
    default = RpcConfig().max_reply_bytes
    limits = {m.part: int(m.max_reply_bytes or default) for m in metas}
    chosen: Optional[Colocation] = None
    for path, parts in by_root.items():
        if not _holds_graph(path, metas[parts[0]].graph, root is not None):
            continue
        candidate = Colocation(path, parts, {p: limits[p] for p in parts})
        try:
            candidate.open()  # mapped once here, so that a failure is told now
        except (PartitionFormatError, PluginNotFoundError, OSError) as exc:
            if root is not None:
                raise StoreError(f"colocate: cannot map parts {parts} of {path}: {exc}") \
                    from exc
            logger.info("colocate: cannot map parts %s of %s (%s); they are asked over "
                        "the socket", parts, path, exc)
            continue
        # One directory serves: several would need one client per directory,
        # and same-host servers of one graph read one directory in practice.
        if chosen is None or len(parts) > len(chosen.parts):
            chosen = candidate
    if chosen is not None:
        logger.info("colocate: parts %s served in this process from %s",
                    list(chosen.parts), chosen.root)
    return chosen


def _holds_graph(path: Path, graph: Any, given: bool) -> bool:
    """Whether ``path`` holds the graph ``graph`` (when not, it is logged, or
    raised where the caller named the directory)."""
    try:
        reader = PartitionReader(path, verify=False, parts=[])
        same = reader.graph_id == graph
    except (PartitionFormatError, OSError) as exc:
        if given:
            raise StoreError(f"colocate: {path} is not a partitioned dataset this version "
                             f"reads ({exc}); pass the directory the servers serve") from exc
        logger.info("colocate: cannot read %s (%s); its parts are asked over the socket",
                    path, exc)
        return False
    if not same:
        if given:
            raise StoreError(f"colocate: {path} holds {describe(reader.graph_id)}, the servers "
                             f"serve {describe(graph)}; pass the directory they serve")
        logger.info("colocate: %s holds another graph than its server serves; its parts "
                    "are asked over the socket", path)
        return False
    return True
