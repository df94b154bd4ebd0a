"""``sample_tree``: a batch's hops carried among the servers.

Sampled hop by hop from the trainer, a batch of ``L`` hops costs ``L``
round trips before its features are fetched: behind 5 ms of link delay,
that is most of an epoch. With ``sample_tree`` the trainer sends a batch's
seeds to one server (the *coordinator*), which runs the whole hop loop:
every hop it splits the frontier by owner, samples its own share in this
process, forwards every other share to its owner as the very ``sample``
request a trainer sends (same per-part seed), and relabels with the
trainer's own code (:meth:`~pyg_dist.sampler.DistNeighborSampler.hop_by_hop`).
The trainer then pays one round trip for the subgraph and one for its
features, and the batch is bit for bit the one hop-by-hop sampling draws.

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
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor

from pyg_dist.errors import ForwardingError, ProtocolError, PygDistError, ServerBusyError
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.context import CallContext
from pyg_dist.rpc.wire_values import describe
from pyg_dist.server.own_part import OwnPartFirst
from pyg_dist.server.requests import int_arg

logger = logging.getLogger(__name__)

Result = tuple[dict[str, Any], list[Tensor]]
Peers = Union[str, Sequence[str], Callable[[], Any], None]
"""The cluster's server list (as :func:`pyg_dist.connect` takes it), or a
callable returning it when first needed (a file written after start-up)."""

MAX_HOPS = 16
"""Most hops one ``sample_tree`` may ask for."""

_SAMPLERS = 32  # distinct sampler settings kept (a hostile client may churn them)
_SEED_RANGE = (0, (1 << 63) - 1)
_SUBGRAPHS = ("directional", "induced")
# Share of the trainer's deadline the coordinator's own calls may use: its
# error (naming the peer that failed) must reach the trainer before the
# trainer gives up on the coordinator.
_DEADLINE_SHARE = 0.8
_WORK_FACTOR = 4


class HopForwarder:
    """Serves ``sample_tree`` for one part.

    Args:
        ops: This server's :class:`~pyg_dist.server.ops.PartitionOps` (its
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
        self._handlers = ops.handlers()
        self._peers = peers
        self._config = config
        self._slots = threading.BoundedSemaphore(max(config.workers - 1, 1))
        self._lock = threading.Lock()
        self._store: Any = None  # the RemoteGraphStore over the peers, once connected
        self._samplers: OrderedDict[tuple, Any] = OrderedDict()
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
        """Every hop of one batch around the seeds ``tensors[0]``, written
        into memory the client lent for it when it did (``ctx``: a trainer
        on this host).

        Args ``num_neighbors`` (one fan-out per hop), ``seed`` (the batch's
        seed, as :meth:`~pyg_dist.sampler.DistNeighborSampler.draw_seed`
        draws it), and optionally ``replace``, ``disjoint``, ``subgraph``
        (``"directional"`` or ``"induced"``), ``timeout`` (the trainer's
        deadline in seconds), ``weight_attr``, ``time_attr`` (a second tensor
        then holds one int64 time per seed) and ``temporal_strategy``.

        Returns:
            Tensors ``node`` (global ids, seeds first), ``row``, ``col``
            (indices into ``node``), ``edge`` (global edge ids),
            ``num_sampled_nodes``, ``num_sampled_edges`` (empty for an
            induced subgraph) and, when disjoint, ``batch``.

        Raises:
            ForwardingError: if this server does not forward, cannot reach
                its peers, or the tree outgrows one reply (its edges are
                counted hop by hop); the trainer then samples hop by hop.
            ServerBusyError: if ``workers - 1`` trees already run here.
            ProtocolError: on a malformed request.
        """
        settings, seed, deadline = _parse(args)
        seeds, seed_time = _seed_tensors(tensors, settings[5] is not None)
        if not self.available:
            raise ForwardingError(
                f"part {self.part} does not forward sampling (no peer list, fewer than 2 "
                f"workers, or CURVE); sample hop by hop, or start it with --peers")
        if not self._slots.acquire(blocking=False):
            raise ServerBusyError(f"part {self.part} already runs "
                                  f"{max(self._config.workers - 1, 1)} sample_tree calls; "
                                  f"ask again")
        try:
            sampler = self._sampler(settings, deadline)
            # Every sampled edge takes 16 bytes of the answer (row, col,
            # edge id): a tree past that is refused as soon as a hop shows it.
            out = sampler.hop_by_hop(seeds, seed_time, seed=seed,
                                     max_edges=self._max_reply_bytes // 16)
            with self._lock:
                self.trees += 1
        finally:
            self._slots.release()
        empty = torch.empty(0, dtype=torch.long)
        answer = [out.node, out.row, out.col, out.edge,
                  empty if out.num_sampled_nodes is None else
                  torch.tensor(out.num_sampled_nodes, dtype=torch.long),
                  empty if out.num_sampled_edges is None else
                  torch.tensor(out.num_sampled_edges, dtype=torch.long)]
        if out.batch is not None:
            answer.append(out.batch)
        # Indices into the nodes (fewer than 2**31: the reply limit) as
        # int32, a third of the answer's bytes saved.
        answer = [t.to(torch.int32 if i in (1, 2) else torch.long) for i, t in enumerate(answer)]
        size = sum(t.element_size() * t.numel() for t in answer)
        if size > self._max_reply_bytes:
            raise ForwardingError(f"the sampled subgraph takes {size} bytes, over the reply "
                                  f"limit of {self._max_reply_bytes} (PYG_DIST_MAX_REPLY_BYTES); "
                                  f"sample it hop by hop")
        if ctx is None or not ctx.lent:
            return {}, [t.contiguous() for t in answer]
        # Too small a loan is a SharedMemoryError: the client asks again
        # without lending (its bound from the fan-outs makes that rare).
        outs = ctx.alloc([(t.dtype, (t.numel(),)) for t in answer])
        for lent, t in zip(outs, answer):
            lent.copy_(t)
        return {}, outs

    def estimate(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """Memory a ``sample_tree`` may take while it runs (an upper bound of
        its answer from the fan-outs and the graph's size, times the work
        around it), charged to the client's reply budget before the tree is
        sampled.

        Raises:
            ProtocolError: on a malformed request (the handler refuses it).
        """
        (fanouts, replace, disjoint, subgraph, *_), _, _ = _parse(args)
        seeds = tensors[0].numel() if tensors else 0
        num_nodes, num_edges = self._graph_size
        copies = seeds if disjoint else 1  # a disjoint tree may repeat the graph per seed
        frontier = nodes = seeds
        edges = 0
        for k in fanouts:
            hop = copies * num_edges if k < 0 else frontier * k
            if not replace:
                hop = min(hop, copies * num_edges)
            frontier = min(hop, copies * num_nodes)
            nodes, edges = nodes + frontier, edges + hop
        if subgraph == "induced":
            edges = min(nodes * nodes, num_edges)
        # The answer, and the peers' answers, reassembly and relabelling
        # while it is built (the same factor as a `sample`); a tree whose
        # edges outgrow one reply is stopped at that hop, so no more.
        answer = min(8 * (nodes + 2 * edges), self._max_reply_bytes)
        return _WORK_FACTOR * answer

    def close(self) -> None:
        """Closes the connections to the peers. Safe to call twice."""
        with self._lock:
            store, self._store, self._closed = self._store, None, True
            self._samplers.clear()
        if store is not None:
            store.router.close()

    # Peers ###################################################################

    def _sampler(self, settings: tuple, deadline: Optional[float]) -> Any:
        """The hop-by-hop sampler of these settings over the peers (kept:
        a weighted or temporal one asks every peer about its attributes
        once)."""
        hop_deadline = None if deadline is None else \
            max(0.01, _DEADLINE_SHARE * deadline / (len(settings[0]) + 1))
        key = (*settings, hop_deadline)
        with self._lock:
            sampler = self._samplers.get(key)
            if sampler is not None:
                self._samplers.move_to_end(key)
                return sampler
        store = self._graph_store()
        from pyg_dist.sampler.dist_neighbor_sampler import DistNeighborSampler

        fanouts, replace, disjoint, subgraph, weight_attr, time_attr, strategy = settings
        try:
            sampler = DistNeighborSampler(store, list(fanouts), replace=replace,
                                          subgraph_type=subgraph, disjoint=disjoint, seed=0,
                                          timeout=hop_deadline, weight_attr=weight_attr,
                                          time_attr=time_attr, temporal_strategy=strategy,
                                          server_hops=False)
        except PygDistError as exc:
            raise ProtocolError(f"sample_tree settings refused: {exc}") from exc
        with self._lock:
            self._samplers[key] = sampler
            while len(self._samplers) > _SAMPLERS:
                self._samplers.popitem(last=False)
        return sampler

    def _graph_store(self) -> Any:
        """The graph store over every part, this one served in process
        (connected on first use)."""
        with self._lock:
            if self._closed:
                raise ForwardingError(f"part {self.part} is stopping")
            if self._store is not None:
                return self._store
            from pyg_dist.store.connect import connect
            from pyg_dist.store.routing import Router

            try:
                peers = self._peers() if callable(self._peers) else self._peers
                _, gs = connect(peers, self._config, tune_malloc=False)
            except PygDistError as exc:
                raise ForwardingError(f"part {self.part} cannot reach its peers to forward "
                                      f"sampling: {exc}") from exc
            router = gs.router
            try:
                if gs.graph_id != self.graph_id or router.num_parts <= self.part:
                    raise ForwardingError(
                        f"part {self.part}'s peer list names servers of another graph "
                        f"({describe(gs.graph_id)}, this server's: "
                        f"{describe(self.graph_id)})")
                # The same stores, with this part's calls served here.
                client = OwnPartFirst(self.part, self._handlers, router.client)
                local = Router(router.endpoints, router.books if router.is_hetero else
                               router.book, router.num_nodes, config=self._config,
                               client=client)
                gs.router = local  # the feature store is not used here
                self._store = gs
                logger.info("part %d forwards sampling to %d peers", self.part,
                            router.num_parts - 1)
            except BaseException:
                router.close()
                raise
            return gs


def _parse(args: dict[str, Any]) -> tuple[tuple, int, Optional[float]]:
    """``(settings, seed, deadline)`` of a ``sample_tree`` request; the
    settings are hashable (samplers are kept by them)."""
    fanouts = args.get("num_neighbors")
    if not isinstance(fanouts, list) or not 1 <= len(fanouts) <= MAX_HOPS or any(
            not isinstance(k, int) or isinstance(k, bool) or not -1 <= k <= 1 << 31
            for k in fanouts):
        raise ProtocolError(f"argument 'num_neighbors' must list 1 to {MAX_HOPS} fan-outs "
                            f"(ints >= -1), got {describe(fanouts)}")
    seed = int_arg(args, "seed", None, *_SEED_RANGE)
    if seed is None:
        raise ProtocolError("argument 'seed' is required")
    flags = []
    for name in ("replace", "disjoint"):
        value = args.get(name, False)
        if not isinstance(value, bool):
            raise ProtocolError(f"argument {name!r} must be a bool, got {describe(value)}")
        flags.append(value)
    subgraph = args.get("subgraph", "directional")
    if subgraph not in _SUBGRAPHS:
        raise ProtocolError(f"argument 'subgraph' must be one of {list(_SUBGRAPHS)}, got "
                            f"{describe(subgraph)}")
    names = []
    for name in ("weight_attr", "time_attr", "temporal_strategy"):
        value = args.get(name)
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 256):
            raise ProtocolError(f"argument {name!r} must be a name, got {describe(value)}")
        names.append(value)
    deadline = args.get("timeout")
    if deadline is not None and (isinstance(deadline, bool)
                                 or not isinstance(deadline, (int, float))
                                 or not math.isfinite(deadline) or not 0 < deadline <= 86400):
        raise ProtocolError(f"argument 'timeout' must be seconds in (0, 86400], got "
                            f"{describe(deadline)}")
    settings = (tuple(fanouts), flags[0], flags[1], subgraph, names[0], names[1],
                names[2] or "uniform")
    return settings, seed, None if deadline is None else float(deadline)


def _seed_tensors(tensors: list[Tensor], timed: bool) -> tuple[Tensor, Optional[Tensor]]:
    """The seeds (1-D int64) and, with ``time_attr``, their times."""
    if len(tensors) != (2 if timed else 1):
        raise ProtocolError(f"sample_tree takes the seeds{' and their times' if timed else ''}"
                            f": {2 if timed else 1} tensors, got {len(tensors)}")
    for t in tensors:
        if t.dtype != torch.int64 or t.dim() != 1 or t.numel() != tensors[0].numel():
            raise ProtocolError(f"sample_tree's tensors must be 1-D int64 of one length, "
                                f"got {[f'{x.dtype} {list(x.shape)}' for x in tensors]}")
    return tensors[0], tensors[1] if timed else None
