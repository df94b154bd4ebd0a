"""A :class:`~pyg_dist.routing.id_router.Router` over a list of servers.

:func:`connect_router` asks every server of a list for its ``meta`` at once,
checks that together they serve every part of one graph exactly once (and
that replicas of a part serve that part), orders them by part and builds the
router over them with the graph's partition books. Both who reach a served
graph use it: :func:`pyg_dist.connect` (which builds the trainer's stores on
the router) and a server coordinating ``sample_tree`` (its peers). A refused
or unresolvable address fails at once (a plain TCP probe).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch import Tensor

from pyg_dist.discovery import server_groups
from pyg_dist.errors import ProtocolError, ServerUnavailableError, StoreError
from pyg_dist.partitioning.book import PartitionBook
from pyg_dist.protocol.ops import META, OPS
from pyg_dist.routing.id_router import Router
from pyg_dist.rpc.wire_format import DTYPES
from pyg_dist.rpc.wire_values import describe

if TYPE_CHECKING:
    from pyg_dist.rpc.retrying import PartitionClient

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeatureInfo:
    """What the servers report about one node feature.

    Args:
        dtype: Its torch dtype.
        shape: Its shape *without* the node dimension (``()`` for labels).
    """

    dtype: torch.dtype
    shape: tuple[int, ...]


@dataclass
class ServerMeta:
    """What one server says about itself and its graph.

    Args:
        address: The endpoint it was reached at.
        part: The part it serves.
        num_parts: Parts of the graph.
        num_nodes: Nodes of the whole graph.
        num_edges: Edges of the whole graph.
        features: ``{(group, name): FeatureInfo}`` of the node features.
        graph: An identity of the partitioned dataset (name and checksums),
            equal on every server of one graph.
        book: The partition book tensor, if the server sent one; for a
            heterogeneous graph, the first node type's (all of them are in
            ``books``).
        host: The server's host identity for shared memory
            (:func:`pyg_dist.rpc.shm.host_id`), if it sent one.
        max_reply_bytes: The server's reply limit, if it sent one; the
            feature store splits bigger ``get`` answers into several calls.
    """

    address: str
    part: int
    num_parts: int
    num_nodes: int
    num_edges: int
    features: dict[tuple[Optional[str], str], FeatureInfo]
    graph: Any
    book: Optional[Tensor]
    host: Optional[str] = None
    max_reply_bytes: Optional[int] = None
    node_types: dict[Optional[str], int] = field(default_factory=dict)
    """Node type -> node count (``{None: num_nodes}`` when homogeneous)."""
    edge_types: dict[Any, int] = field(default_factory=dict)
    """Edge type ``(src, rel, dst)`` -> edge count (``{None: num_edges}``)."""
    books: list[Tensor] = field(default_factory=list)
    """One partition book tensor per node type, in the order of ``node_types``."""
    result: dict[str, Any] = field(default_factory=dict)
    """The whole ``meta`` result (edge attribute specs are read from it)."""

    @property
    def is_hetero(self) -> bool:
        """Whether the server serves a heterogeneous graph."""
        return None not in self.node_types


def connect_router(addresses: Union[Sequence[Union[str, Sequence[str]]], str, None],
                   config: Any = None, timeout: Optional[float] = None
                   ) -> tuple[Router, list[ServerMeta]]:
    """A router over the servers of one graph, and what each part's server
    said of itself.

    Args:
        addresses: As :func:`pyg_dist.connect` takes them (replicas of a
            part grouped; ``None`` reads ``PYG_DIST_SERVERS``).
        config: An :class:`~pyg_dist.rpc.config.RpcConfig`; ``None`` uses the
            defaults and the environment.
        timeout: Deadline of the ``meta`` calls; ``None`` uses the config's
            ``connect_timeout``.

    Returns:
        ``(router, metas)``: ``metas[k]`` is part ``k``'s (its first
        replica's). Close the router to close the connections.

    Raises:
        ServerListError, StoreError, ServerUnavailableError, RpcError: as
            :func:`pyg_dist.connect` documents them.
    """
    from pyg_dist.rpc.retrying import RetryingClient

    groups = server_groups(addresses)
    flat = [e for g in groups for e in g]
    # ZeroMQ retries a refused connection quietly until the meta deadline
    # (10 s by default); a refusal is an answer, so it fails here at once.
    refuse_fast(flat)
    client: Optional[RetryingClient] = RetryingClient(flat, config, OPS)  # every replica asked
    try:
        deadline = client.config.connect_timeout if timeout is None else timeout
        futures = [client.call_async(*META.request(i), timeout=deadline)
                   for i in range(len(flat))]
        replies = iter([parse_meta(flat[i], client.result(f, i, META.name, deadline))
                        for i, f in enumerate(futures)])
        metas = [[next(replies) for _ in g] for g in groups]
        _check_replicas(metas)
        order = _check_cluster([m[0] for m in metas])
        by_part = [metas[i][0] for i in order]
        _books(by_part)  # checked before anything else is built
    except BaseException:
        client.close()
        raise
    ordered = [groups[i] for i in order]
    if any(len(g) > 1 for g in groups) or order != list(range(len(groups))):
        # The client indexes servers by position (one per part, in part
        # order); replicas are grouped by part: the router makes that client.
        client.close()
        client = None
    replicas = ordered if any(len(g) > 1 for g in ordered) else None
    return router_over(by_part, [g[0] for g in ordered], config, client, replicas), by_part


def router_over(metas: list[ServerMeta], endpoints: list[str], config: Any = None,
                client: Optional[PartitionClient] = None,
                replicas: Optional[list[list[str]]] = None) -> Router:
    """The router over servers whose ``meta`` was checked.

    Args:
        metas: One per part, in part order.
        endpoints: What the router addresses part ``k`` by.
        config: The RPC configuration.
        client: A connected client whose server ``k`` is part ``k``, or
            ``None`` to connect on first use.
        replicas: Per part, its replica endpoints (the first is
            ``endpoints[k]``): reads fail over among them.
    """
    first = metas[0]
    books = _books(metas)
    return Router(endpoints, books if first.is_hetero else books[None], first.num_nodes,
                  config=config, client=client, replicas=replicas)


# How long a probe of one address may take; a host that does not answer at
# all (no refusal) is left to the RPC deadline.
_PROBE_TIMEOUT_S = 2.0


def refuse_fast(endpoints: list[str]) -> None:
    """Raises at once if a TCP endpoint refuses connections or does not resolve.

    Probes every ``tcp://`` endpoint concurrently with a plain TCP connect
    (closed at once; the server sees a peer that left before its
    handshake). Timeouts and other errors are not decided here: the RPC
    deadline decides them, as before.

    Args:
        endpoints: Normalised endpoints (``tcp://host:port``, ``ipc://path``).

    Raises:
        ServerUnavailableError: naming the first refused or unresolvable
            address and what to check.
    """
    tcp = [e for e in endpoints if e.startswith("tcp://")]
    if not tcp:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(tcp))) as pool:
        problems = list(pool.map(_probe, tcp))
    for endpoint, problem in zip(tcp, problems):
        if problem is not None:
            raise ServerUnavailableError(
                f"cannot reach server {endpoint}: {problem}; is 'pyg-dist serve' running "
                f"there and listening on that port (the 'ready' line it printed names its "
                f"endpoint)?")


def _probe(endpoint: str) -> Optional[str]:
    """Why ``endpoint`` refuses at once, or ``None`` (reachable or undecided)."""
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        with socket.create_connection((host, int(port)), timeout=_PROBE_TIMEOUT_S):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror as exc:
        return f"host name {host!r} does not resolve ({exc.strerror or exc})"
    except (OSError, ValueError):
        return None  # unreachable hosts and the like: the RPC deadline decides


def _check_replicas(metas: list[list[ServerMeta]]) -> None:
    """Every replica serves the same part of the same graph as its group's first."""
    for group in metas:
        first = group[0]
        for meta in group[1:]:
            if (meta.part, meta.num_parts, meta.graph, meta.node_types, meta.edge_types,
                    meta.features) != (first.part, first.num_parts, first.graph,
                                       first.node_types, first.edge_types, first.features):
                raise StoreError(
                    f"{meta.address} is listed as a replica of {first.address} but serves "
                    f"part {meta.part} of another or different graph (part {first.part} "
                    f"expected); list only servers of the same part and dataset together")


def parse_meta(address: str, reply: Any) -> ServerMeta:
    """What server ``address`` said in its ``meta`` ``reply``, checked.

    Raises:
        ProtocolError: on a reply without the expected fields.
    """
    result = reply.result
    try:
        part = int(result["part"])
        num_parts = int(result["num_parts"])
        num_nodes = int(result["num_nodes"])
        num_edges = int(result["num_edges"])
        features = _features(None, result["features"])
        node_types: dict[Optional[str], int] = {None: num_nodes}
        edge_types: dict[Any, int] = {None: num_edges}
        if result.get("is_hetero") is True:
            node_types, edge_types = {}, {}
            for entry in result["node_types"]:
                name = str(entry["name"])
                node_types[name] = int(entry["num_nodes"])
                features.update(_features(name, entry["features"]))
            for entry in result["edge_types"]:
                src, rel, dst = (str(v) for v in entry["type"])
                edge_types[(src, rel, dst)] = int(entry["num_edges"])
            if not node_types or not edge_types:
                raise ValueError("a heterogeneous graph without node or edge types")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolError(f"server {address} answered 'meta' without the expected fields "
                            f"({type(exc).__name__}: {exc}); is it a pyg-dist partition "
                            f"server of the same version?", address=address, op=META.name) from exc
    if len(reply.tensors) not in (0, len(node_types)):
        raise ProtocolError(f"server {address} sent {len(reply.tensors)} partition books "
                            f"for {len(node_types)} node types", address=address, op=META.name)
    graph = result.get("graph", result.get("checksum"))
    book = reply.tensors[0] if reply.tensors else None
    host = result.get("host")
    limit = result.get("max_reply_bytes")
    return ServerMeta(address, part, num_parts, num_nodes, num_edges, features, graph, book,
                      host if isinstance(host, str) else None,
                      limit if isinstance(limit, int) and limit > 0 else None,
                      node_types, edge_types, list(reply.tensors), result)


def _features(group: Optional[str], specs: Any) -> dict[tuple[Optional[str], str], FeatureInfo]:
    """``{(group, name): FeatureInfo}`` of one node type's ``meta`` specs."""
    features = {}
    for name, spec in specs.items():
        dtype = DTYPES.get(str(spec["dtype"]))  # the wire's dtypes, nothing else of torch's
        if dtype is None:
            raise TypeError(f"not a dtype: {describe(spec['dtype'])}")
        features[(group, str(name))] = FeatureInfo(dtype, tuple(int(s) for s in spec["shape"]))
    return features


def _check_cluster(metas: list[ServerMeta]) -> list[int]:
    """Validates that the servers serve each part of one graph once; returns
    the server indices ordered by part."""
    first = metas[0]
    for m in metas[1:]:
        same = (m.num_parts, m.num_nodes, m.num_edges, m.graph, m.node_types,
                m.edge_types) == (first.num_parts, first.num_nodes, first.num_edges,
                                  first.graph, first.node_types, first.edge_types)
        if not same or m.features != first.features:
            raise StoreError(f"servers {first.address} and {m.address} serve different graphs "
                             f"(parts/nodes/edges {first.num_parts}/{first.num_nodes}/"
                             f"{first.num_edges} vs {m.num_parts}/{m.num_nodes}/{m.num_edges}); "
                             f"point every trainer at the servers of one partitioned dataset")
    by_part: dict[int, int] = {}
    for i, m in enumerate(metas):
        if m.part in by_part:
            raise StoreError(f"part {m.part} is served twice ({metas[by_part[m.part]].address} "
                             f"and {m.address}); pass each part's server once")
        by_part[m.part] = i
    missing = sorted(set(range(first.num_parts)) - set(by_part))
    if missing:
        raise StoreError(f"no server for part(s) {missing} of {first.num_parts}; start "
                         f"'pyg-dist serve ROOT --part K' for each and pass all addresses")
    return [by_part[k] for k in range(first.num_parts)]


def _books(metas: list[ServerMeta]) -> dict[Optional[str], PartitionBook]:
    """One partition book per node type (``{None: book}`` when homogeneous),
    from the first of ``metas`` (in part order)."""
    first = metas[0]
    if not first.books:
        raise ProtocolError(f"server {first.address} sent no partition book with 'meta'",
                            address=first.address, op=META.name)
    books = {}
    for (node_type, count), tensor in zip(first.node_types.items(), first.books):
        book = PartitionBook.from_tensor(tensor, first.num_parts)
        if book.num_nodes != count:
            of = "" if node_type is None else f" of node type {node_type!r}"
            raise ProtocolError(f"the partition book{of} covers {book.num_nodes} nodes, the "
                                f"graph has {count}", address=first.address, op=META.name)
        books[node_type] = book
    return books
