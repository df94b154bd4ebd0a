"""``sample_tree``: a batch's hops carried among the servers.

Sampled hop by hop from the trainer, a batch of ``L`` hops costs ``L``
round trips before its features are fetched: behind 5 ms of link delay,
that is most of an epoch. With ``sample_tree`` the trainer sends a batch's
seeds to one server (the *coordinator*), which runs the whole hop loop:
every hop it splits the frontier by owner, samples its own share in this
process, forwards every other share to its owner as the very ``sample``
request a trainer sends (same per-part seed), and relabels: it runs the
trainer's own hop loop (:func:`~pyg_dist.hops.loop.sample_hops`) over a
:class:`~pyg_dist.routing.id_router.Router` to its peers. The trainer then
pays one round trip for the subgraph and one for its features, and the batch
is bit for bit the one hop-by-hop sampling draws. A heterogeneous batch is
sampled the same way (one ``sample`` of every edge type per peer and hop); a
homogeneous one is its one-type case (edge type and node type nil).

Peers: a server forwards only when it was given the cluster's server list
(``pyg-dist serve --peers`` or ``--peers-file``, which
:class:`~pyg_dist.cluster.LocalCluster` writes once every server is ready),
and says so in ``meta`` (``forwarding``). It connects to its peers on the
first ``sample_tree`` and checks that they serve every part of its own
graph; where it cannot, the request fails with
:class:`~pyg_dist.errors.ForwardingError` and the trainer samples hop by
hop. CURVE servers do not forward (a server would need a client key its
peers authorise).

Deadlock: a coordinator holds a worker thread while its peers answer. If
every worker of two servers held a ``sample_tree`` waiting on the other,
neither could answer the other's ``sample``. So at most ``workers - 1``
trees run at once on a server (a server needs two workers to forward): one
worker is always left for plain requests, and an extra tree is refused as
busy, which the trainer's retry layer asks again.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NamedTuple, Optional, Union

from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput
from torch_geometric.typing import EdgeType, NodeType

from pyg_dist.errors import (
    ForwardingError,
    ProtocolError,
    PygDistError,
    RemoteError,
    RpcError,
    ServerBusyError,
    remote_error,
)
from pyg_dist.hops.fan_outs import check_num_neighbors
from pyg_dist.hops.loop import sample_hops
from pyg_dist.hops.one_hop import sample_hop
from pyg_dist.hops.settings import HopSettings
from pyg_dist.protocol import tree_codec, tree_owners, tree_rows
from pyg_dist.routing.id_router import Router
from pyg_dist.routing.servers import connect_router
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.context import CallContext
from pyg_dist.rpc.wire_values import describe, error_text
from pyg_dist.server.own_part import OwnPartFirst
from pyg_dist.server.placed_rows import TreeRowWriter
from pyg_dist.server.tree_requests import TreeRequest, parse_tree

logger = logging.getLogger(__name__)

Result = tuple[dict[str, Any], list[Tensor]]
Peers = Union[str, Sequence[str], Callable[[], Any], None]
"""The cluster's server list (as :func:`pyg_dist.connect` takes it), or a
callable returning it when first needed (a file written after start-up)."""

# Share of the trainer's deadline the coordinator's own calls may use: its
# error (naming the peer that failed) must reach the trainer before the
# trainer gives up on the coordinator.
_DEADLINE_SHARE = 0.8
# A tree's charge to the reply budget, as a multiple of its answer's bound.
# What it holds at its peak is 4.8-6.4x its *actual* answer (the peers'
# replies, their reassembly, the relabelled hops, the reply's int32 copies;
# peak RSS of a fresh server). The bound counts k new nodes per node and hop,
# so on a real graph, where sampled nodes repeat, it is several times the
# answer and 4x it covers the peak; only where the bound is tight (fan-outs
# below every degree, few repeats) does a tree hold up to ~1.6x its charge.
# 7x closed that, but then one [15, 10, 5] tree of 1,024 seeds on a
# products-sized graph (a 22.5 MB bound: 157 MB charged) left no room for a
# second in a client's 256 MiB: trees in flight were refused and backed off,
# and an H200 sampled [15, 10, 5] at a quarter of the rate (47.1k -> 11.7k
# seeds/s, whole table cached); 2 cores here, 29.1 -> 24.0 batches/s. So 4x
# admits a tree, and the charge is revised as its hops come in, to what it
# holds and the next hop may add (pyg_dist/server/own_part.py).
_WORK_FACTOR = 4


class HopForwarder:
    """Serves ``sample_tree`` for one part.

    Args:
        ops: This server's :class:`~pyg_dist.server.partition_ops.PartitionOps` (its
            share of every hop is served by its ``sample`` in this process;
            every peer must serve its graph, ``graph_id``).
        peers: The cluster's server list, or ``None`` (no forwarding).
        config: The server's configuration (deadlines, worker count).
    """

    def __init__(self, ops: Any, peers: Peers, config: RpcConfig) -> None:
        self.part = ops.part
        self.graph_id = ops.graph_id
        self._graph_size = (int(ops.num_nodes), int(ops.reader.num_edges))
        self._max_reply_bytes = int(ops.max_reply_bytes)
        # The biggest answer a tree may build: one reply, and with its working
        # memory within one client's reply budget (else it could never be
        # admitted, and a tree charged less than it holds would break the
        # budget). A bigger tree is stopped at the hop that outgrows it and
        # sampled hop by hop from the trainer.
        self._max_answer = max(64, min(self._max_reply_bytes,
                                       config.client_reply_budget // _WORK_FACTOR))
        self._handlers = ops.handlers()
        self._rows = TreeRowWriter(ops.part, ops.reader)
        self._peers = peers
        self._config = config
        self._slots = threading.BoundedSemaphore(max(config.workers - 1, 1))
        self._lock = threading.Lock()
        self._cluster: Optional[_Cluster] = None  # the router over the peers, once connected
        self._connecting: Optional[_Attempt] = None  # the connection attempt running
        self._peer_parts: dict[str, int] = {}  # a peer's endpoint -> its part
        self._closed = False
        self.trees = 0
        """Batches sampled here so far (``stats``' ``sample_tree_calls``)."""

    @property
    def available(self) -> bool:
        """Whether this server forwards: it has a peer list, two workers or
        more, and no CURVE (see the module doc)."""
        return self._peers is not None and self._config.workers >= 2 \
            and not self._config.curve_server

    def sample_tree(self, args: dict[str, Any], tensors: list[Tensor],
                    ctx: Optional[CallContext] = None) -> Result:
        """Every hop of one batch around the seeds of ``seed_types``
        (``sizes`` of each, one after another in ``tensors[0]``), over the
        edge types ``edge_types`` with one fan-out list each (a homogeneous
        graph: ``[nil]`` both), written into memory the client lent for it
        when it did (``ctx``: a trainer on this host).

        Args also ``seed`` (the batch's seed, as
        :meth:`~pyg_dist.sampler.DistNeighborSampler.draw_seed` draws it),
        and optionally ``replace``, ``disjoint``, ``subgraph``
        (``"directional"`` or ``"induced"``), ``timeout`` (the trainer's
        deadline in seconds), ``weight_attr``, ``time_attr`` (a second tensor
        then holds one int64 time per seed), ``temporal_strategy``
        (:mod:`pyg_dist.server.tree_requests`), ``owners`` (a homogeneous
        tree's nodes grouped by owning part after it:
        :mod:`pyg_dist.protocol.tree_owners`) and ``rows`` (with ``owners``:
        the rows of its nodes written into the trainer's outputs before it
        answers: :mod:`pyg_dist.protocol.tree_rows`).

        Returns:
            Result ``node_types`` (every node type, in the graph's order;
            ``[nil]`` for a homogeneous graph) and the subgraph's tensors as
            :mod:`pyg_dist.protocol.tree_codec` lays them out.

        Raises:
            ForwardingError: if this server does not forward, cannot reach
                its peers, or the tree outgrows one reply (its edges are
                counted hop by hop); the trainer then samples hop by hop.
            ServerBusyError: if ``workers - 1`` trees already run here.
            ProtocolError: on a malformed request.
        """
        request = parse_tree(args, tensors)
        owners, rows = tree_owners.asked(args), tree_rows.asked(args)
        if (owners or rows) and not request.homogeneous:
            raise ProtocolError("arguments 'owners' and 'rows' are for a homogeneous graph's "
                                "tree (edge_types [nil]); leave them out for typed edge types")
        if rows and not owners:
            raise ProtocolError("argument 'rows' needs 'owners': true (each owner is sent "
                                "its share of the nodes)")

        def finish(out: HeteroSamplerOutput, cluster: _Cluster, timeout: Optional[float]
                   ) -> tuple[dict[str, Any], list[Tensor]]:
            if not owners:
                return {}, []
            # The book's split, as the trainer's own would be: its nodes'
            # rows are then asked for without a lookup there (or written by
            # their owners now, with `rows`).
            book = cluster.router.book
            shares = book.split(out.node[None])
            counts, order = tree_owners.encode(shares, book.num_parts)
            extra: dict[str, Any] = {"owner_counts": counts}
            if rows:
                extra["rows"] = self._rows.write(args["rows"], shares, out.node[None].numel(),
                                                 cluster.router, cluster.reply_limits,
                                                 timeout, ctx)
            return extra, [order]

        out, (extra, more) = self._run(request, finish)
        result, answer = tree_codec.encode(out, list(request.fanouts))
        result.update(extra)
        return result, self._reply(answer + more, ctx)

    def _run(self, request: TreeRequest, finish: Callable[..., Any]
             ) -> tuple[HeteroSamplerOutput, Any]:
        """The hop loop of ``request`` over the peers, and ``finish(tree,
        cluster, timeout)``'s work on it, within a tree slot (its rows'
        fetch waits on the peers as its hops do: see the module's
        deadlock note)."""
        if not self.available:
            raise ForwardingError(
                f"part {self.part} does not forward sampling (no peer list, fewer than 2 "
                f"workers, or CURVE); sample hop by hop, or start it with --peers")
        if not self._slots.acquire(blocking=False):
            raise ServerBusyError(f"part {self.part} already runs "
                                  f"{max(self._config.workers - 1, 1)} trees; ask again")
        try:
            cluster = self._connected()
            settings, fanouts = _hop_settings(request, cluster)
            seeds = {t: cluster.router.check_ids(ids, "seed nodes", t)
                     for t, ids in request.seeds.items()}
            one_hop = partial(sample_hop, cluster.router, num_edges=cluster.edge_counts)
            # Every sampled edge takes 16 bytes of the answer (row, col,
            # edge id): a tree past that is refused as soon as a hop shows it.
            out = sample_hops(one_hop, settings, cluster.sizes, fanouts, seeds,
                              request.seed_time, request.seed, self._max_answer // 16)
            finished = finish(out, cluster, settings.timeout)
            with self._lock:
                self.trees += 1
            return out, finished
        except PygDistError as exc:
            told = self._without_peer_addresses(exc)
            if told is exc:
                raise
            raise told from exc
        finally:
            self._slots.release()

    def _without_peer_addresses(self, exc: PygDistError) -> PygDistError:
        """``exc`` as the client may see it: every peer's address replaced by
        its part (``part 1``), the address logged here instead. The cluster's
        addresses are the operator's, not every client's to learn (a client
        needs only the servers it was given)."""
        with self._lock:
            parts = dict(self._peer_parts)
        text = error_text(exc)
        scrubbed = hide_addresses(text, parts)
        address = getattr(exc, "address", None)
        if scrubbed == text and address not in parts:
            return exc
        logger.warning("part %d: a tree failed at a peer: %s", self.part, text)
        if isinstance(exc, RemoteError):
            return remote_error(exc.remote_type, hide_addresses(exc.remote_message, parts),
                                address=f"part {parts[address]}" if address in parts
                                else None, op=exc.op)
        if isinstance(exc, RpcError):
            return type(exc)(scrubbed, op=exc.op)
        try:
            return type(exc)(scrubbed)
        except TypeError:  # a class with other arguments: the text matters more
            return ForwardingError(scrubbed)

    def _reply(self, answer: list[Tensor], ctx: Optional[CallContext]) -> list[Tensor]:
        """The answer's tensors (:func:`~pyg_dist.protocol.tree_codec.encode`),
        refused over the biggest answer a tree may build; in memory the
        client lent, when it did."""
        size = sum(t.element_size() * t.numel() for t in answer)
        if size > self._max_answer:
            limit = f"the reply limit of {self._max_reply_bytes} (PYG_DIST_MAX_REPLY_BYTES)" \
                if self._max_answer == self._max_reply_bytes else \
                f"{self._max_answer} bytes, a tree's share of the client reply budget " \
                f"(PYG_DIST_CLIENT_REPLY_BUDGET / {_WORK_FACTOR})"
            raise ForwardingError(f"the sampled subgraph takes {size} bytes, over {limit}; "
                                  f"sample it hop by hop")
        if ctx is None or not ctx.lent:
            return [t.contiguous() for t in answer]
        # Too small a loan is a SharedMemoryError: the client asks again
        # without lending (its bound from the fan-outs makes that rare).
        outs = ctx.alloc([(t.dtype, (t.numel(),)) for t in answer])
        for lent, t in zip(outs, answer):
            lent.copy_(t)
        return outs

    def estimate(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """Memory a tree may take while it runs (an upper bound of its answer
        from the fan-outs and the graph's size, times the work around it),
        charged to the client's reply budget before the tree is sampled.

        Raises:
            ProtocolError: on a malformed request (the handler refuses it).
        """
        request = parse_tree(args, tensors)
        settings = request.settings
        answer = tree_codec.tree_answer_bytes(
            tensors[0].numel(), request.per_hop, settings.disjoint, graph=self._graph_size,
            replace=settings.replace, induced=settings.induced)
        # The answer, and the peers' answers, reassembly and relabelling
        # while it is built (the same factor as a `sample`); a tree whose
        # edges outgrow one reply is stopped at that hop, so no more.
        answer = min(answer, self._max_answer)
        return _WORK_FACTOR * answer

    def close(self, release_wait: float = 0.0) -> None:
        """Closes the connections to the peers. Safe to call twice.

        Args:
            release_wait: Seconds to wait for the peers to take back the
                memory this server lent them for their answers. None by
                default: a server stops when its peers stop too (a launcher
                stops them all at once), and a release that each waited for
                from stopped peers cost 2 s a peer, past the launcher's grace
                (it SIGKILLed every server). A peer that runs on unmaps the
                segments once it sees this process has exited.
        """
        with self._lock:
            cluster, self._cluster, self._closed = self._cluster, None, True
        if cluster is not None:
            cluster.router.close(release_wait)

    # Peers ###################################################################

    def _connected(self) -> _Cluster:
        """The router over every part, this one served in process
        (connected on first use).

        One connection attempt at a time, and not under :attr:`_lock`: an
        unreachable peer takes the whole connect timeout, and the trees
        arriving meanwhile wait for that attempt's outcome instead of each
        making its own after it (which serialised them: 10, 20, 30 s).
        """
        while True:
            with self._lock:
                if self._closed:
                    raise ForwardingError(f"part {self.part} is stopping")
                if self._cluster is not None:
                    return self._cluster
                attempt = self._connecting
                if attempt is None:
                    attempt = self._connecting = _Attempt()
                    break
            attempt.done.wait()
            if attempt.error is not None:
                raise ForwardingError(str(attempt.error)) from attempt.error
        try:
            cluster = self._connect()
            with self._lock:
                if self._closed:
                    cluster.router.close()
                    raise ForwardingError(f"part {self.part} is stopping")
                self._cluster = cluster
            return cluster
        except BaseException as exc:
            attempt.error = exc if isinstance(exc, PygDistError) else ForwardingError(
                f"part {self.part} could not connect to its peers: {type(exc).__name__}")
            raise
        finally:
            with self._lock:
                self._connecting = None
            attempt.done.set()

    def _connect(self) -> _Cluster:
        """Connects to the peers and checks that they serve this graph."""
        peers: Any = None
        try:
            peers = self._peers() if callable(self._peers) else self._peers
            router, metas = connect_router(peers, self._config)
        except PygDistError as exc:
            # The peers' addresses stay in this log (see
            # _without_peer_addresses); the client learns which part failed.
            text = error_text(exc)
            logger.warning("part %d cannot reach its peers: %s", self.part, text)
            raise ForwardingError(f"part {self.part} cannot reach its peers to forward "
                                  f"sampling: {hide_addresses(text, _listed_parts(peers))}"
                                  ) from exc
        try:
            first = metas[0]
            if first.graph != self.graph_id or router.num_parts <= self.part:
                raise ForwardingError(
                    f"part {self.part}'s peer list names servers of another graph "
                    f"({describe(first.graph)}, this server's: "
                    f"{describe(self.graph_id)})")
            # The same router, with this part's calls served here.
            client = OwnPartFirst({self.part: self._handlers}, router.client)
            local = Router(router.endpoints, router.books if router.is_hetero else
                           router.book, router.num_nodes, config=self._config,
                           client=client)
            groups = router.replicas or [[e] for e in router.endpoints]
            with self._lock:
                self._peer_parts = {e: k for k, group in enumerate(groups) for e in group}
            logger.info("part %d forwards sampling to %d peers", self.part,
                        router.num_parts - 1)
            return _Cluster(local, dict(first.node_types), dict(first.edge_types),
                            [self._max_reply_bytes if k == self.part else m.max_reply_bytes
                             for k, m in enumerate(metas)])
        except BaseException:
            router.close()
            raise


class _Cluster(NamedTuple):
    """The peers, once connected: the router over them (this part served
    in process), every node type's size and every edge type's edge count,
    in the graph's order, and every part's reply limit."""

    router: Router
    sizes: dict[Optional[NodeType], int]
    edge_counts: dict[Optional[EdgeType], int]
    reply_limits: list[Optional[int]]


def _hop_settings(request: TreeRequest, cluster: _Cluster
                  ) -> tuple[HopSettings, dict[Optional[EdgeType], list[int]]]:
    """The request's settings, and its fan-outs per edge type in the graph's
    order (the order the trainer's loop samples them in), checked against
    the graph.

    Raises:
        ProtocolError: naming the setting the graph refuses.
    """
    hops = len(request.per_hop)
    # The coordinator's calls share the trainer's deadline among the hops.
    timeout = None if request.deadline is None else \
        max(0.01, _DEADLINE_SHARE * request.deadline / (hops + 1))
    try:
        checked = check_num_neighbors(request.fanouts[None] if request.homogeneous
                                      else request.fanouts, list(cluster.edge_counts))
    except PygDistError as exc:
        raise ProtocolError(f"tree settings refused: {exc}") from exc
    return replace(request.settings, timeout=timeout), \
        checked if isinstance(checked, dict) else {None: checked}


class _Attempt:
    """One connection attempt to the peers, awaited by the trees that
    arrive while it runs."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Optional[BaseException] = None

def hide_addresses(text: str, parts: dict[str, int]) -> str:
    """``text`` with each endpoint of ``parts`` (``tcp://host:port``, also
    written ``host:port``) replaced by ``part K``."""
    names = {}
    for endpoint, part in parts.items():
        names[endpoint] = names[endpoint.split("://", 1)[-1]] = f"part {part}"
    if not names:
        return text
    # Longest first (tcp://h:p before h:p); no digit after (h:80 in h:8080).
    pattern = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.sub(f"(?:{pattern})(?![0-9])", lambda m: names[m.group(0)], text)


def _listed_parts(peers: Any) -> dict[str, int]:
    """A peer list (``"a:1|a2:1,b:1"`` or per part a list of replicas) as
    endpoint -> part, for :func:`hide_addresses`; what is not understood is
    left out (the list is checked where it is used, by ``connect``)."""
    groups = peers.replace("\n", ",").split(",") if isinstance(peers, str) else \
        list(peers) if isinstance(peers, (list, tuple)) else []
    parts = {}
    for part, group in enumerate(groups):
        members = group.split("|") if isinstance(group, str) else \
            list(group) if isinstance(group, (list, tuple)) else []
        for member in members:
            if isinstance(member, str) and member.strip():
                member = member.strip()
                parts[member if "://" in member else f"tcp://{member}"] = part
    return parts


