"""``DistLinkNeighborLoader``: PyG's ``LinkNeighborLoader``, sampling on partition servers.

A thin layer over PyG's :class:`~torch_geometric.loader.LinkLoader`: it
builds a :class:`~pyg_dist.sampler.DistNeighborSampler`, whose
``sample_from_edges`` draws negative links on the trainer (uniform over the
graph's global node ids, or over the endpoint types' nodes of a
heterogeneous graph, seeded per batch; no topology is fetched) and samples
around both endpoints through PyG's own ``edge_sample``. Batches are joined
with their node and edge attributes (:mod:`pyg_dist.loader.batches`: one
``multi_get_tensor``, one round trip) and carry PyG's link schema:
``edge_label_index`` / ``edge_label`` (no or binary negatives) or
``src_index`` / ``dst_pos_index`` / ``dst_neg_index`` (triplet), plus
``input_id``, ``n_id``, ``e_id`` and the sampled counts.

It shares the iteration paths (``prefetch``, worker processes, ``device``)
and the argument checks of :class:`~pyg_dist.loader.DistNeighborLoader`
(:mod:`pyg_dist.loader.iteration`, :mod:`pyg_dist.loader.arguments`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkLoader
from torch_geometric.sampler import (
    BaseSampler,
    HeteroSamplerOutput,
    NegativeSampling,
    SamplerOutput,
)
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.typing import EdgeType

from pyg_dist.errors import LoaderError
from pyg_dist.loader.arguments import check_seed_times, check_store_pair, loader_sampler
from pyg_dist.loader.batches import data_batch, hetero_batch
from pyg_dist.loader.iteration import DistIteration
from pyg_dist.sampler.link_sampling import check_negative_sampling
from pyg_dist.store import tree_outputs
from pyg_dist.store.remote_feature_store import RemoteFeatureStore
from pyg_dist.store.remote_graph_store import RemoteGraphStore

logger = logging.getLogger(__name__)


class DistLinkNeighborLoader(DistIteration, LinkLoader):
    """Link-level neighbour-sampling mini-batches from a served graph.

    Takes the arguments of PyG's
    :class:`~torch_geometric.loader.LinkNeighborLoader` and yields the same
    :class:`~torch_geometric.data.Data` batches; all ids are global.

    Under ``torch.distributed`` (world size > 1) the seed links are split
    evenly across ranks as :class:`~pyg_dist.loader.DistNeighborLoader`
    splits input nodes (same number of batches on every rank); pass
    ``split=False`` to have every rank iterate over all of them (evaluation
    on one rank).

    Args:
        data: The ``(feature_store, graph_store)`` pair from
            :func:`pyg_dist.connect`.
        num_neighbors: Neighbours to sample per node and hop; ``-1`` takes
            all of them. Required unless ``neighbor_sampler`` is given.
        edge_label_index: Seed links: a ``[2, E]`` integer tensor of global
            node ids, ``(None, tensor)``, or ``None`` for every edge of the
            graph; on a heterogeneous graph ``(edge_type, tensor)``,
            ``(edge_type, None)`` or ``edge_type`` (every edge of the type),
            sources of ``edge_type``'s source type, destinations of its
            destination type.
        edge_label: Labels of the seed links, ``E`` entries (PyG's rules:
            with binary negatives, labels starting at 0 are shifted by one
            so that 0 means negative).
        edge_label_time: One integer time per seed link (with
            ``time_attr``): each link's endpoints are sampled only in their
            past; negatives get the times of the positives, as in PyG.
        replace: Sample with replacement.
        subgraph_type: ``"directional"``, ``"bidirectional"`` or
            ``"induced"``.
        disjoint: Give every seed link its own subgraph (adds ``batch``).
        temporal_strategy: ``"uniform"`` or ``"last"`` (with ``time_attr``).
        neg_sampling: ``None``, ``"binary"``, ``"triplet"`` or a PyG
            :class:`~torch_geometric.sampler.NegativeSampling`. Negative
            endpoints are drawn uniformly over all nodes (or by its
            ``src_weight`` / ``dst_weight``), reproducibly from ``seed``.
        neg_sampling_ratio: PyG's deprecated shortcut for
            ``NegativeSampling("binary", neg_sampling_ratio)``.
        time_attr: A node or edge time of the served graph (see
            :class:`~pyg_dist.DistNeighborLoader`); needs ``edge_label_time``.
        weight_attr: An edge attribute of the served graph to draw neighbours
            in proportion to (see :class:`~pyg_dist.DistNeighborLoader`).
        transform: Applied to every finished batch.
        transform_sampler_output: Applied to every ``SamplerOutput``.
        is_sorted: Accepted hint, as in ``DistNeighborLoader``.
        filter_per_worker: As in ``DistNeighborLoader``.
        neighbor_sampler: A ready PyG ``BaseSampler`` with
            ``sample_from_edges``; the sampler settings are then refused.
        directed: Deprecated PyG flag; ``False`` means ``"induced"``.
        custom_cls: A ``Data`` subclass to build batches of.
        seed: Seeds the sampler (neighbours and negatives) and the DDP
            shuffle.
        prefetch: Batches produced ahead on worker threads.
        device: A device to put every batch on.
        rank: DDP rank; ``None`` asks ``torch.distributed``.
        world_size: DDP world size; ``None`` asks ``torch.distributed``.
        split: Under DDP, split the seed links across ranks (``True``) or
            give every rank all of them (``False``).
        timeout: Deadline of every sampling RPC in seconds.
        server_hops: Whether the servers sample a batch's hops among
            themselves (one round trip for the subgraph, the same batches);
            ``None`` when they all can (see
            :class:`~pyg_dist.sampler.DistNeighborSampler`).
        global_batch_size: Inputs per optimiser step over all ranks: every
            rank takes ``global_batch_size // world_size``, so that a DDP
            step is the local script's ``batch_size=global_batch_size``
            step. ``batch_size`` itself is per rank, as in PyG (a shuffled
            loader split across ranks warns once that it is).
        **kwargs: Arguments of :class:`torch.utils.data.DataLoader`
            (``batch_size``, ``shuffle``, ``drop_last``, ``num_workers``, ...),
            honoured or refused as in ``DistNeighborLoader``.

    Raises:
        LoaderError: on an invalid configuration or seed links (ids out of
            range, wrong dtype or shape, labels of the wrong length).
        SamplerError: on a negative sampling configuration that cannot draw
            on this graph.
    """

    def __init__(
        self,
        data: tuple[RemoteFeatureStore, RemoteGraphStore],
        num_neighbors: Optional[list[int]] = None,
        edge_label_index: Any = None,
        edge_label: Optional[Tensor] = None,
        edge_label_time: Optional[Tensor] = None,
        replace: bool = False,
        subgraph_type: Union[SubgraphType, str] = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        neg_sampling: Union[NegativeSampling, str, None] = None,
        neg_sampling_ratio: Optional[Union[int, float]] = None,
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        transform: Optional[Callable] = None,
        transform_sampler_output: Optional[Callable] = None,
        is_sorted: bool = False,
        filter_per_worker: Optional[bool] = None,
        neighbor_sampler: Optional[BaseSampler] = None,
        directed: bool = True,
        *,
        custom_cls: Optional[type[Data]] = None,
        seed: Optional[int] = None,
        prefetch: int = 0,
        device: Optional[Union[str, torch.device]] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        split: bool = True,
        timeout: Optional[float] = None,
        server_hops: Optional[bool] = None,
        global_batch_size: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        fs, gs = check_store_pair(data, "DistLinkNeighborLoader", "LinkNeighborLoader")
        if (edge_label_time is None) != (time_attr is None):
            raise LoaderError("temporal link sampling needs both time_attr (the node or edge "
                              "time to sample by) and edge_label_time (one time per seed "
                              "link), as PyG's LinkNeighborLoader does; got only "
                              + ("edge_label_time" if time_attr is None else "time_attr"))
        ddp = self._set_up(kwargs, prefetch=prefetch, device=device, rank=rank,
                           world_size=world_size, split=split,
                           global_batch_size=global_batch_size,
                           filter_per_worker=filter_per_worker)
        neighbor_sampler = loader_sampler(
            (fs, gs), neighbor_sampler, num_neighbors, ddp=ddp, directed=directed,
            replace=replace, subgraph_type=subgraph_type, disjoint=disjoint, seed=seed,
            timeout=timeout, weight_attr=weight_attr, time_attr=time_attr,
            temporal_strategy=temporal_strategy, server_hops=server_hops)
        neg_sampling = _negative_sampling(neg_sampling, neg_sampling_ratio)
        if neg_sampling is not None and neg_sampling.is_triplet() and edge_label is not None:
            raise LoaderError("edge_label must be None with triplet negative sampling (PyG's "
                              "rule): batches tell positives from negatives by src_index, "
                              "dst_pos_index and dst_neg_index")
        edge_type, seeds = _seed_links(gs, edge_label_index)
        if edge_type is None:
            check_negative_sampling(neg_sampling, gs.num_nodes)
        else:
            check_negative_sampling(neg_sampling, gs.router.num_nodes_of(edge_type[0]),
                                    gs.router.num_nodes_of(edge_type[-1]))
        edge_label = _check_labels(edge_label, seeds.size(1))
        self._share_inputs(kwargs, seeds.size(1), neighbor_sampler, ddp=ddp, seed=seed)
        try:
            super().__init__(data=(fs, gs), link_sampler=neighbor_sampler,
                             edge_label_index=(edge_type, seeds), edge_label=edge_label,
                             edge_label_time=check_seed_times(
                                 edge_label_time, seeds.size(1), time_attr, "edge_label_time"),
                             neg_sampling=neg_sampling, transform=transform,
                             transform_sampler_output=transform_sampler_output,
                             filter_per_worker=filter_per_worker, custom_cls=custom_cls,
                             **kwargs)
        except ValueError as exc:
            raise LoaderError(f"invalid DataLoader arguments: {exc}") from exc

    # Iteration (the seam is pyg_dist.loader.iteration) #######################

    def _produce(self, item: tuple[Union[list[int], Tensor], Optional[int]]) -> Data:
        """Samples and fetches one batch (thread-safe)."""
        index, seed = item
        inputs = self.input_data[index]
        # Its node features are fetched right after, on this thread: a tree
        # sampled on the servers may have them written in its round trip.
        with tree_outputs.fetching(self.data[0]):
            if self._seeded:
                out = self.link_sampler.sample_from_edges(inputs, self.neg_sampling, seed=seed)
            else:
                out = self.link_sampler.sample_from_edges(inputs, neg_sampling=self.neg_sampling)
        return self.filter_fn(out)

    # Joining features #######################################################

    def filter_fn(self, out: Union[SamplerOutput, HeteroSamplerOutput]
                  ) -> Union[Data, HeteroData]:
        """Joins a sampler output with its features into a link batch.

        PyG's ``LinkLoader.filter_fn`` for a ``(FeatureStore, GraphStore)``
        pair, without its special case for a sampler class named
        ``DistNeighborSampler`` (see :mod:`pyg_dist.sampler.metadata`); a
        heterogeneous batch lays its labels out as PyG's does (under the
        seed edge type, or ``src_index`` / ``dst_pos_index`` /
        ``dst_neg_index`` under the endpoint types).
        """
        if self.transform_sampler_output:
            out = self.transform_sampler_output(out)
        meta = out.metadata
        if isinstance(out, HeteroSamplerOutput):
            data = hetero_batch(self.data[0], out, self.custom_cls)
            input_type = self.input_data.input_type
            data[input_type].input_id = meta[0]
            if self.neg_sampling is None or self.neg_sampling.is_binary():
                data[input_type].edge_label_index = meta[1]
                data[input_type].edge_label = meta[2]
                data[input_type].edge_label_time = meta[3]
            else:
                data[input_type[0]].src_index = meta[1]
                data[input_type[-1]].dst_pos_index = meta[2]
                data[input_type[-1]].dst_neg_index = meta[3]
                data[input_type[0]].seed_time = meta[4]
                data[input_type[-1]].seed_time = meta[4]
            return data if self.transform is None else self.transform(data)
        if not isinstance(out, SamplerOutput):
            raise LoaderError(f"expected a SamplerOutput or HeteroSamplerOutput from the "
                              f"sampler, got {type(out).__name__}")
        data = data_batch(self.data[0], out, self.custom_cls, self.link_sampler.edge_permutation)
        data.input_id = meta[0]
        if self.neg_sampling is None or self.neg_sampling.is_binary():
            data.edge_label_index, data.edge_label, data.edge_label_time = meta[1], meta[2], \
                meta[3]
        else:
            data.src_index, data.dst_pos_index, data.dst_neg_index = meta[1], meta[2], meta[3]
            data.seed_time = meta[4]
        return data if self.transform is None else self.transform(data)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_links={self.input_data.row.numel()}, "
                f"batches={len(self)}, rank={self.rank}/{self.world_size}, "
                f"split={self.split}, prefetch={self.prefetch})")


def _negative_sampling(neg_sampling: Any, ratio: Any) -> Optional[NegativeSampling]:
    """PyG's ``NegativeSampling`` of the arguments (``ratio`` wins, as in PyG)."""
    try:
        if ratio is not None and ratio != 0.0:
            return NegativeSampling("binary", ratio)
        return NegativeSampling.cast(neg_sampling)
    except (ValueError, TypeError) as exc:
        raise LoaderError(f"neg_sampling must be None, 'binary', 'triplet' or a "
                          f"NegativeSampling with a positive amount (an int for triplet); "
                          f"got neg_sampling={neg_sampling!r}, neg_sampling_ratio={ratio!r}: "
                          f"{exc}") from exc


def _seed_links(gs: RemoteGraphStore, edge_label_index: Any
                ) -> tuple[Optional[EdgeType], Tensor]:
    """The seed links' edge type (``None`` on a homogeneous graph) and the
    links as a ``[2, E]`` int64 tensor of global ids, checked."""
    edge_type = None
    if isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) == 2 \
            and not isinstance(edge_label_index[0], (Tensor, int, list)):
        edge_type, edge_label_index = edge_label_index
    elif isinstance(edge_label_index, (str, tuple)) and not isinstance(edge_label_index[0],
                                                                       (Tensor, int, list)):
        edge_type, edge_label_index = edge_label_index, None
    elif edge_label_index is None and gs.is_hetero:
        gs.edge_type_key(None)  # names the edge types
    # Refuses an edge type on a homogeneous graph and an unknown one, naming
    # the edge types there are.
    edge_type = gs.edge_type_key(edge_type)
    if edge_label_index is None:
        # Every edge of the type, in global edge-id order (gathered from the
        # servers once and cached by the graph store).
        attr = next(a for a in gs.get_all_edge_attrs() if a.edge_type == edge_type)
        row, col = gs.get_edge_index(attr)
        return edge_type, torch.stack([row, col]).to(torch.long)
    if not isinstance(edge_label_index, Tensor):
        try:
            edge_label_index = torch.as_tensor(edge_label_index)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise LoaderError(f"edge_label_index must be a [2, E] integer tensor, got "
                              f"{type(edge_label_index).__name__}") from exc
    ids = edge_label_index
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise LoaderError(f"edge_label_index must hold integer node ids, got dtype {ids.dtype}")
    if ids.dim() != 2 or ids.size(0) != 2:
        raise LoaderError(f"edge_label_index must have shape [2, E] (sources, destinations), "
                          f"got {tuple(ids.shape)}")
    if ids.size(1) == 0:
        raise LoaderError("edge_label_index holds no links; pass at least one")
    ends = [(None, gs.num_nodes)] * 2 if edge_type is None else \
        [(t, gs.router.num_nodes_of(t)) for t in (edge_type[0], edge_type[-1])]
    for row, (node_type, n), name in zip(ids, ends, ("source", "destination")):
        low, high = int(row.min()), int(row.max())
        if low < 0 or high >= n:
            of = "the served graph's nodes" if node_type is None else \
                f"the nodes of type {node_type!r}"
            raise LoaderError(f"edge_label_index holds {name} ids outside [0, {n}) ({of}): "
                              f"min {low}, max {high}")
    return edge_type, ids.to(torch.long).cpu()


def _check_labels(edge_label: Any, num_links: int) -> Optional[Tensor]:
    if edge_label is None:
        return None
    if not isinstance(edge_label, Tensor):
        edge_label = torch.as_tensor(edge_label)
    if edge_label.dim() == 0 or edge_label.size(0) != num_links:
        raise LoaderError(f"edge_label needs one entry per seed link ({num_links}), got shape "
                          f"{tuple(edge_label.shape)}")
    return edge_label.cpu()
