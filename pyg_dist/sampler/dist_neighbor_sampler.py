"""Distributed neighbour sampling that returns PyG's own ``SamplerOutput``.

:class:`DistNeighborSampler` samples hop by hop. Every hop it splits the
frontier (global ids) by owner with the partition book, asks every owning
server at once for the neighbours of its share, puts the answers back into
frontier order and relabels them the way PyG's ``NeighborSampler`` does:
seeds first, then each new node in order of first appearance, hop by hop;
``row`` holds the (local) source of every sampled edge, ``col`` its
destination, ``edge`` the global edge id. With full fan-out (``-1``) the
output equals PyG's local ``NeighborSampler`` on the unpartitioned graph.

Weighted and temporal sampling (``weight_attr``, ``time_attr``) happen on
the servers (:mod:`pyg_dist.server.sample_attrs`); every hop sends each
frontier node's seed time with it. Temporal sampling is disjoint, as PyG's:
each seed grows its own tree, and a node's seed time is that of its root.

Randomness: every batch draws one 63-bit seed from the sampler's generator
(on the caller's thread), and every hop and server derives its own seed from
it. A fixed ``seed`` therefore reproduces every batch, whatever order the
servers answer in and however many batches a prefetch pipeline keeps in
flight.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import TensorAttr
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)
from torch_geometric.sampler.base import NumNeighbors, SubgraphType

from pyg_dist.errors import (
    ForwardingError,
    GraphKindMismatchError,
    RemoteError,
    SamplerError,
    StoreError,
)
from pyg_dist.hops.fan_outs import check_num_neighbors
from pyg_dist.hops.loop import one_type, sample_hops
from pyg_dist.hops.settings import SEED_BOUND, HopSettings
from pyg_dist.sampler import link_sampling
from pyg_dist.sampler.metadata import SamplerMetadata
from pyg_dist.sampler.server_hops import sample_tree
from pyg_dist.store.remote_graph_store import RemoteGraphStore

logger = logging.getLogger(__name__)


class DistNeighborSampler(BaseSampler):
    """PyG ``BaseSampler`` that samples neighbours on partition servers.

    Args:
        data: The ``(feature_store, graph_store)`` pair returned by
            :func:`pyg_dist.connect`, or the graph store alone.
        num_neighbors: Neighbours to sample per node and hop; ``-1`` takes
            all of them. A list (the same for every edge type of a
            heterogeneous graph) or, on a heterogeneous graph, a dict
            ``{edge_type: list}`` covering every edge type, as in PyG.
        replace: Sample with replacement.
        subgraph_type: ``"directional"`` (the sampled edges only),
            ``"bidirectional"`` (sampled edges plus their reverses) or
            ``"induced"`` (every edge among the sampled nodes).
        disjoint: Give every seed its own subgraph; the output then carries
            ``batch``, the seed index of every node.
        seed: Seed of the sampler's random generator. ``None`` seeds it from
            torch's global generator, so ``torch.manual_seed`` before
            building the sampler reproduces its batches.
        timeout: Deadline of every sampling call in seconds; ``None`` uses
            the RPC configuration's.
        weight_attr: An edge attribute of the partitioned graph to draw
            neighbours by (probability proportional to it; weight 0 never
            drawn), with or without replacement.
        time_attr: A node or edge attribute holding integer times: only
            neighbours (or edges) no later than the seed's time are drawn.
            Makes sampling disjoint, as in PyG.
        temporal_strategy: ``"uniform"`` or ``"last"`` (the most recent
            neighbours), with ``time_attr``.
        server_hops: Whether the servers carry a batch's hops among
            themselves (``sample_tree``: one round trip for the subgraph
            instead of one per hop; the same batches). ``None`` (default):
            when every server forwards (``pyg-dist serve --peers``; ``pyg-dist
            launch`` starts them so), the graph is homogeneous and not every
            part is served in this process (``connect(colocate=True)``); ``True``:
            required; ``False``: never, every hop goes back to the trainer.

    Raises:
        SamplerError: on an unsupported or invalid configuration, naming
            an attribute the servers cannot draw by.
    """

    def __init__(
        self,
        data: Union[tuple[Any, RemoteGraphStore], RemoteGraphStore],
        num_neighbors: Union[list[int], NumNeighbors],
        replace: bool = False,
        subgraph_type: Union[SubgraphType, str] = "directional",
        disjoint: bool = False,
        seed: Optional[int] = None,
        timeout: Optional[float] = None,
        weight_attr: Optional[str] = None,
        time_attr: Optional[str] = None,
        temporal_strategy: str = "uniform",
        server_hops: Optional[bool] = None,
    ) -> None:
        graph_store = data[1] if isinstance(data, (tuple, list)) else data
        if not isinstance(graph_store, RemoteGraphStore):
            raise SamplerError(
                f"DistNeighborSampler needs the (feature_store, graph_store) pair from "
                f"pyg_dist.connect(), got a graph store of type {type(graph_store).__name__}")
        self.graph_store = graph_store
        self.num_nodes = graph_store.num_nodes
        self.num_neighbors: Any = check_num_neighbors(num_neighbors, graph_store.edge_types)
        # Per edge type (None: a homogeneous graph's one), as the hop loop takes them.
        self._fanouts = self.num_neighbors if self.is_hetero else {None: self.num_neighbors}
        self.num_hops = len(next(iter(self._fanouts.values())))
        try:
            subgraph_type = SubgraphType(subgraph_type)
        except ValueError as exc:
            raise SamplerError(f"subgraph_type must be one of 'directional', 'bidirectional', "
                               f"'induced'; got {subgraph_type!r}") from exc
        self.feature_store = data[0] if isinstance(data, (tuple, list)) else None
        # Temporal sampling is disjoint (PyG's is_temporal implies disjoint).
        self.settings = HopSettings(
            replace=bool(replace), disjoint=bool(disjoint) or time_attr is not None,
            subgraph_type=subgraph_type, weight_attr=weight_attr, time_attr=time_attr,
            temporal_strategy=temporal_strategy, timeout=timeout)
        self.settings.check()
        self.time_kind = self._check_attributes()
        if seed is None:
            seed = int(torch.randint(0, SEED_BOUND, (1,)))
        self._generator = torch.Generator().manual_seed(int(seed))
        self._generator_lock = threading.Lock()
        self.server_hops = self._server_hops_setting(server_hops)
        self.coordinators = itertools.count()  # whose turn it is to coordinate a batch

    def _check_attributes(self) -> Optional[str]:
        """Checks the weight and time attributes on every server; returns
        where the time lives (``"node"``, ``"edge"`` or ``None``)."""
        settings = self.settings
        if settings.weight_attr is None and settings.time_attr is None:
            return None
        try:
            return self.graph_store.check_sample_attributes(
                settings.weight_attr, settings.time_attr, settings.temporal_strategy,
                timeout=settings.timeout)
        except (RemoteError, StoreError) as exc:
            raise SamplerError(f"the servers cannot sample by weight_attr="
                               f"{settings.weight_attr!r}, time_attr={settings.time_attr!r}: "
                               f"{getattr(exc, 'remote_message', None) or exc}") from exc

    def _server_hops_setting(self, server_hops: Optional[bool]) -> bool:
        """Whether batches are sampled with ``sample_tree``: ``server_hops``
        checked against what the servers allow (``None``: when they do).

        Raises:
            SamplerError: if ``server_hops`` is not ``None``/``True``/``False``,
                or ``True`` where the servers do not forward.
        """
        if server_hops not in (None, True, False):
            raise SamplerError(f"server_hops must be None, True or False, got {server_hops!r}")
        able = bool(getattr(self.graph_store, "forwarding", False))
        if server_hops and not able:
            raise SamplerError("server_hops=True, but the servers do not forward (start them "
                               "with --peers, or with pyg-dist launch)")
        if server_hops is None:
            # Parts all served in this process sample fastest here: a tree
            # would send every hop to a server and back.
            every_part_here = len(getattr(self.graph_store, "colocated_parts", ())) \
                == self.graph_store.router.num_parts
            return able and not every_part_here
        return bool(server_hops)

    @property
    def disjoint(self) -> bool:
        """Whether every seed grows its own tree (temporal sampling does)."""
        return self.settings.disjoint

    @property
    def is_hetero(self) -> bool:
        """Whether the served graph is heterogeneous (batches are then
        ``HeteroSamplerOutput``, node ids numbered per node type)."""
        return self.graph_store.is_hetero

    @property
    def is_temporal(self) -> bool:
        """Whether sampling follows ``time_attr``."""
        return self.settings.time_attr is not None

    def draw_seed(self) -> int:
        """Draws the random seed of one batch (thread-safe).

        A loader calls this on its consumer thread, in batch order, and
        passes the value to :meth:`sample_from_nodes`, so that batches do not
        depend on which worker thread samples them.
        """
        with self._generator_lock:
            seed = int(torch.randint(0, SEED_BOUND, (1,), generator=self._generator))
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            # Every DataLoader worker holds a copy of the same generator:
            # mix in the worker's own seed so workers do not repeat batches.
            seed = HopSettings.hop_seed(seed ^ (worker.seed % SEED_BOUND), worker.id + 1)
        return seed

    # PyG BaseSampler interface #############################################

    def sample_from_nodes(self, index: NodeSamplerInput, seed: Optional[int] = None,
                          **kwargs: Any) -> SamplerOutput:
        """Samples the subgraph around the seed nodes of ``index``.

        Args:
            index: The seed nodes (global ids) and their input ids.
            seed: The batch's random seed; drawn with :meth:`draw_seed` when
                ``None``.
            **kwargs: Ignored (PyG's interface).

        Returns:
            A :class:`~torch_geometric.sampler.SamplerOutput` whose
            ``metadata`` is ``(input_id, seed_time)`` as in PyG.
        """
        if self.is_hetero:
            out = self._sample_hetero(index.input_type, index.node, index.time, seed)
        else:
            if index.input_type is not None:
                raise GraphKindMismatchError(
                    f"input nodes of type {index.input_type!r} were given, but the served "
                    f"graph is homogeneous; pass plain node ids")
            out = self._sample(index.node, index.time, seed=seed)
        # A tuple that refuses PyG's NodeLoader reading features from its end.
        out.metadata = SamplerMetadata((index.input_id, index.time))
        return self._finish(out)

    def sample_from_edges(self, index: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None,
                          seed: Optional[int] = None) -> SamplerOutput:
        """Samples the subgraph around seed links and their negatives.

        See :func:`pyg_dist.sampler.link_sampling.sample_from_edges`.

        Args:
            index: The seed links (global ids), labels and input ids.
            neg_sampling: Negative sampling configuration, as in PyG.
            seed: The batch's random seed (neighbours and negatives); drawn
                with :meth:`draw_seed` when ``None``.
        """
        base_seed = self.draw_seed() if seed is None else int(seed)
        if self.is_hetero:
            num_nodes: Any = {t: self.graph_store.router.num_nodes_of(t)
                              for t in self.graph_store.node_types}
            sample_fn: Any = self._sample_seed_dict
        else:
            if index.input_type is not None:
                raise GraphKindMismatchError(
                    f"seed links of edge type {index.input_type!r} were given, but the "
                    f"served graph is homogeneous; pass a [2, E] tensor")
            num_nodes, sample_fn = self.num_nodes, self._sample
        out = link_sampling.sample_from_edges(sample_fn, index, num_nodes, self.disjoint,
                                              neg_sampling, base_seed)
        return self._finish(out)

    @property
    def edge_permutation(self) -> None:
        """``None``: ``edge`` already holds global edge ids."""
        return None

    # Sampling ##############################################################

    def _finish(self, out: SamplerOutput) -> SamplerOutput:
        if self.settings.subgraph_type == SubgraphType.bidirectional:
            out = out.to_bidirectional()
        return out

    def _sample_hetero(self, input_type: Any, seeds: Tensor, seed_time: Optional[Tensor],
                       seed: Optional[int]) -> HeteroSamplerOutput:
        """Samples all hops around ``seeds`` (global ids of ``input_type``)."""
        if input_type is None:
            types = ", ".join(map(repr, self.graph_store.node_types[:8]))
            raise GraphKindMismatchError(
                f"the served graph is heterogeneous: name the input node type, e.g. "
                f"input_nodes=({self.graph_store.node_types[0]!r}, ids) (node types: {types})")
        return self._sample_seed_dict({input_type: seeds}, None if seed_time is None else
                                      {input_type: seed_time}, seed=seed)

    def _sample_seed_dict(self, seeds: dict[str, Tensor],
                          seed_time: Optional[dict[str, Tensor]] = None, *,
                          seed: Optional[int] = None) -> HeteroSamplerOutput:
        """Samples around seeds of several node types (a heterogeneous link
        batch's two endpoint types; PyG's ``edge_sample`` calls this): on
        the servers (``sample_tree``) when they forward, else hop by
        hop."""
        seeds, seed_time = self._checked_seeds(seeds, seed_time)
        base_seed = self.draw_seed() if seed is None else int(seed)
        return self._on_servers(seeds, seed_time, base_seed) if self.server_hops else \
            self._hops(seeds, seed_time, base_seed, None)

    def _sample(self, seed_nodes: Tensor, seed_time: Optional[Tensor] = None, *,
                seed: Optional[int] = None) -> SamplerOutput:
        """Samples all hops around ``seed_nodes`` (global ids): the
        one-type case (node and edge type ``None``) of :meth:`_sample_seed_dict`."""
        return one_type(self._sample_seed_dict({None: seed_nodes}, None if seed_time is None
                                               else {None: seed_time}, seed=seed))

    def hop_by_hop(self, seed_nodes: Tensor, seed_time: Optional[Tensor] = None, *,
                   seed: Optional[int] = None,
                   max_edges: Optional[int] = None) -> SamplerOutput:
        """Samples all hops around ``seed_nodes`` (global ids), every hop a
        round trip from here to the servers owning its frontier, whatever
        ``server_hops`` says (the batches ``sample_tree`` must equal).

        Args:
            seed_nodes: Global ids of the seeds.
            seed_time: With ``time_attr``, one time per seed (``None``: the
                seeds' own node times).
            seed: The batch's random seed (:meth:`draw_seed` when ``None``).
            max_edges: Stop with :class:`~pyg_dist.errors.ForwardingError`
                once the hops so far sampled more edges.
        """
        seeds, times = self._checked_seeds({None: seed_nodes}, None if seed_time is None
                                           else {None: seed_time})
        base_seed = self.draw_seed() if seed is None else int(seed)
        return one_type(self._hops(seeds, times, base_seed, max_edges))

    def _hops(self, seeds: dict[Optional[str], Tensor],
              seed_time: Optional[dict[Optional[str], Tensor]], base_seed: int,
              max_edges: Optional[int]) -> HeteroSamplerOutput:
        """The hop loop over the remote graph store (checked seeds)."""
        gs = self.graph_store
        sizes = {t: gs.router.num_nodes_of(t) for t in gs.node_types}
        return sample_hops(gs.sample_hop, self.settings, sizes, self._fanouts, seeds, seed_time,
                           base_seed, max_edges)

    def _on_servers(self, seeds: dict[Optional[str], Tensor],
                    seed_time: Optional[dict[Optional[str], Tensor]],
                    base_seed: int) -> HeteroSamplerOutput:
        """One ``sample_tree`` of a batch (checked seeds); if its coordinator
        cannot forward (``ForwardingError``), the batch and every later one
        are sampled hop by hop, with one warning in the log."""
        gs = self.graph_store
        # Batches take turns among the servers (which one coordinates does not
        # change the batch): trees in flight spread evenly over their slots.
        part = next(self.coordinators) % gs.router.num_parts
        try:
            return sample_tree(gs.router, part, self.settings, self._fanouts, gs.node_types,
                               seeds, seed_time, base_seed)
        except RemoteError as exc:
            if exc.remote_type != ForwardingError.__name__:
                raise
            logger.warning("the servers cannot sample on their own (%s); sampling hop by hop "
                           "from now on", exc.remote_message or exc)
            self.server_hops = False
        return self._hops(seeds, seed_time, base_seed, None)

    def _checked_seeds(self, seeds: dict[Optional[str], Tensor],
                       seed_time: Optional[dict[Optional[str], Tensor]]
                       ) -> tuple[dict[Optional[str], Tensor],
                                  Optional[dict[Optional[str], Tensor]]]:
        """Seeds per node type (``None`` on a homogeneous graph) checked
        against the graph, and their int64 times (with ``time_attr``; the
        seeds' own node times where none were given).

        Raises:
            StoreError, UnknownTypeError: on ids out of range, unknown types.
            SamplerError: on seed times without ``time_attr``, or bad ones.
        """
        router = self.graph_store.router
        seeds = {t: router.check_ids(ids.view(-1).cpu(), "seed nodes", t)
                 for t, ids in seeds.items()}
        if self.settings.time_attr is not None:
            seed_time = {t: self._seed_times(ids, None if seed_time is None else
                                             seed_time.get(t), t) for t, ids in seeds.items()}
        elif seed_time is not None:
            raise SamplerError("seed times (input_time) were given but time_attr is None; "
                               "set time_attr to sample temporally")
        return seeds, seed_time

    def _seed_times(self, seeds: Tensor, time: Optional[Tensor],
                    node_type: Optional[str]) -> Tensor:
        """The int64 time of every seed: ``time`` (``input_time``) checked,
        or the seeds' own node times."""
        time_attr = self.settings.time_attr
        if time is None:
            if self.time_kind != "node" or self.feature_store is None:
                raise SamplerError(f"time_attr {time_attr!r} is an edge time: pass "
                                   f"input_time, one time per seed")
            time = self.feature_store.get_tensor(TensorAttr(node_type, time_attr, seeds))
        if not isinstance(time, Tensor) or time.is_floating_point() or time.is_complex() \
                or time.dtype == torch.bool or time.numel() != seeds.numel():
            raise SamplerError(
                f"input_time for time_attr {time_attr!r} must hold one integer time per "
                f"seed ({seeds.numel()}), got "
                f"{getattr(time, 'dtype', type(time).__name__)} of "
                f"{getattr(time, 'numel', lambda: '?')()} values")
        return time.view(-1).to(torch.long).cpu()

    def __repr__(self) -> str:
        settings = self.settings
        return (f"{self.__class__.__name__}(num_neighbors={self.num_neighbors}, "
                f"replace={settings.replace}, subgraph_type={settings.subgraph_type.value}, "
                f"disjoint={settings.disjoint}, weight_attr={settings.weight_attr!r}, "
                f"time_attr={settings.time_attr!r}, server_hops={self.server_hops})")
