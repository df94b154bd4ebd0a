"""``DistNeighborLoader``: PyG's ``NeighborLoader``, sampling on partition servers.

A thin layer over PyG's :class:`~torch_geometric.loader.NodeLoader`: it
builds a :class:`~pyg_dist.sampler.DistNeighborSampler`, and batches are
joined with their node and edge attributes by :mod:`pyg_dist.loader.batches`
(PyG's ``filter_custom_store`` with edge attributes: one
``multi_get_tensor``, hence one round trip to the servers, per batch). A training
script swaps ``NeighborLoader(data, ...)`` for
``DistNeighborLoader(pyg_dist.connect(), ...)`` and nothing else changes.

Iteration goes through one seam, ``_iterate`` (shared with the link loader
in :class:`~pyg_dist.loader.iteration.DistIteration`): work
items (a batch of input positions and its random seed) are drawn in order on
the caller's thread by :meth:`~DistNeighborLoader._work_items`, and turned
into batches by :meth:`~DistNeighborLoader._produce`, either one after the
other (``prefetch=0``) or ``prefetch`` batches ahead on worker threads
(:class:`~pyg_dist.loader.prefetch.PrefetchPipeline`). Either way a fixed
``seed`` gives the same batches: the sampler is asked for its batches' seeds
in order when it is a :class:`~pyg_dist.sampler.SeededSampler` (what the
loader needs from a sampler beyond PyG's ``BaseSampler``; no class checks).
With ``num_workers > 0`` the ``DataLoader``'s own worker processes are used.
Which ``DataLoader`` arguments each path honours, and which it refuses, is
decided in :mod:`pyg_dist.loader.arguments`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import BaseSampler, HeteroSamplerOutput, SamplerOutput
from torch_geometric.sampler.base import SubgraphType

from pyg_dist.errors import LoaderError
from pyg_dist.loader.arguments import check_seed_times, check_store_pair, loader_sampler
from pyg_dist.loader.batches import data_batch, hetero_batch
from pyg_dist.loader.iteration import DistIteration
from pyg_dist.store import tree_outputs
from pyg_dist.store.remote_feature_store import RemoteFeatureStore
from pyg_dist.store.remote_graph_store import RemoteGraphStore

logger = logging.getLogger(__name__)


class DistNeighborLoader(DistIteration, NodeLoader):
    """Neighbour-sampling mini-batches from a graph served by partition servers.

    Takes the arguments of PyG's
    :class:`~torch_geometric.loader.NeighborLoader` and yields the same
    :class:`~torch_geometric.data.Data` (or, on a heterogeneous graph,
    :class:`~torch_geometric.data.HeteroData`) batches (``x``, ``edge_index``, ``y``,
    ``n_id``, ``e_id``, ``input_id``, ``batch_size``, ``num_sampled_nodes``,
    ``num_sampled_edges``; ids are global).

    Under ``torch.distributed`` (initialised, world size > 1) the input nodes
    are split evenly across ranks so that every DDP rank takes the same
    number of steps: with ``drop_last=False`` the shorter ranks are padded by
    wrapping around the (shuffled) input list, with ``drop_last=True`` the
    tail is truncated. The per-epoch shuffle is the same on every rank
    (seeded by ``seed``, default 0, plus the epoch). ``split=False`` turns
    the split off: every rank then iterates over all input nodes (e.g.
    whole-graph evaluation or layer-wise inference on one rank).

    Every argument is honoured or refused: ``DataLoader`` and ``NodeLoader``
    arguments that a path (``prefetch=0``, ``prefetch=K`` or
    ``num_workers > 0``) cannot act on raise :class:`LoaderError` naming
    them (the table is in ``docs/loader.md``).

    Args:
        data: The ``(feature_store, graph_store)`` pair from
            :func:`pyg_dist.connect`.
        num_neighbors: Neighbours to sample per node and hop; ``-1`` takes
            all of them; on a heterogeneous graph one list for every edge
            type or ``{edge_type: list}`` covering each. Required unless
            ``neighbor_sampler`` is given (then ``None`` or the sampler's own
            list).
        input_nodes: Seed nodes: global ids, a boolean mask over all nodes,
            ``(None, ids_or_mask)``, or ``None`` for every node; on a
            heterogeneous graph ``(node_type, ids_or_mask)``,
            ``(node_type, None)`` or ``node_type`` (every node of the type).
        input_time: One integer time per seed (after ``input_nodes`` is
            resolved): only neighbours no later than it are sampled. Needs
            ``time_attr``; without it, a node ``time_attr`` gives the seeds'
            own times.
        replace: Sample with replacement.
        subgraph_type: ``"directional"``, ``"bidirectional"`` or
            ``"induced"``.
        disjoint: Give every seed its own subgraph (adds ``batch``).
        temporal_strategy: With ``time_attr``: ``"uniform"`` draws among
            the past neighbours, ``"last"`` takes the most recent ones.
        time_attr: A node or edge attribute of integer times served with the
            partition; sampling is then temporal and disjoint (every seed its
            own subgraph, ``batch`` and ``seed_time`` in the batch), as PyG's.
        weight_attr: An edge attribute of finite, non-negative weights;
            neighbours are drawn with probability proportional to it.
        transform: Applied to every finished batch.
        transform_sampler_output: Applied to every ``SamplerOutput``.
        is_sorted: PyG's hint that a local ``edge_index`` is sorted by
            destination, so that it need not sort it; the servers hold CSC
            sorted at partition time, so either value gives the same batches.
        filter_per_worker: As in PyG: with ``num_workers``, whether worker
            processes (``True``, PyG's default for stores) or the main
            process join features. Prefetch threads always join them
            (``False`` is refused there).
        custom_cls: A ``Data`` subclass to build batches of (PyG's
            ``custom_cls``).
        neighbor_sampler: A ready PyG ``BaseSampler`` to use instead of
            building one; if it is a :class:`~pyg_dist.sampler.SeededSampler`
            its batches are reproducible on every path. The sampler settings
            (``replace``, ``subgraph_type``, ``disjoint``, ``directed``,
            ``timeout``, ``seed`` outside DDP) are then refused.
        directed: Deprecated PyG flag; ``False`` means ``"induced"``.
        seed: Seeds the sampler's random generator (and the DDP shuffle), so
            that a fixed seed reproduces every batch.
        prefetch: Batches produced ahead on worker threads while the model
            trains; ``0`` produces each batch when it is asked for.
        device: A device to put every batch on, e.g. ``"cuda"``, on every
            path. With ``prefetch``, batches are pinned and copied on a side
            stream (``non_blocking``) while the model trains; otherwise each
            batch is copied when it is asked for.
        rank: DDP rank; ``None`` asks ``torch.distributed``.
        world_size: DDP world size; ``None`` asks ``torch.distributed``.
        split: Under DDP, split the input nodes across ranks (``True``, the
            default: every rank covers its share, reduce metrics across
            ranks) or give every rank all of them (``False``).
        timeout: Deadline of every sampling RPC in seconds; ``None`` uses the
            RPC configuration's (feature fetches always use it). This is not
            ``DataLoader``'s ``timeout``: the RPC deadlines bound every batch
            on every path, so that one stays 0.
        server_hops: Whether the servers sample a batch's hops among
            themselves (one round trip for the subgraph, the same batches);
            ``None`` when they all can (see
            :class:`~pyg_dist.sampler.DistNeighborSampler`).
        global_batch_size: Inputs per optimiser step over all ranks: every
            rank takes ``global_batch_size // world_size``, so that a DDP
            step is the local script's ``batch_size=global_batch_size``
            step. ``batch_size`` itself is per rank, as in PyG (a shuffled
            loader split across ranks warns once that it is).
        **kwargs: Arguments of :class:`torch.utils.data.DataLoader`:
            ``batch_size``, ``shuffle``, ``sampler``, ``batch_sampler``,
            ``drop_last``, ``generator``, ``pin_memory``, ``in_order``,
            ``num_workers`` and, with ``num_workers``, its worker-process
            options.

    Raises:
        LoaderError: on an unsupported or invalid configuration, or an
            argument that would have no effect on the chosen path.
    """

    def __init__(
        self,
        data: tuple[RemoteFeatureStore, RemoteGraphStore],
        num_neighbors: Optional[list[int]] = None,
        input_nodes: Union[Tensor, list[int], None] = None,
        input_time: Optional[Tensor] = None,
        replace: bool = False,
        subgraph_type: Union[SubgraphType, str] = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
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
        fs, gs = check_store_pair(data, "DistNeighborLoader", "NeighborLoader")
        if input_time is not None and time_attr is None:
            raise LoaderError("input_time is set while time_attr is not; name the node or "
                              "edge time to sample by with time_attr (as PyG's "
                              "NeighborLoader requires)")
        ddp = self._set_up(kwargs, prefetch=prefetch, device=device, rank=rank,
                           world_size=world_size, split=split,
                           global_batch_size=global_batch_size,
                           filter_per_worker=filter_per_worker)
        neighbor_sampler = loader_sampler(
            (fs, gs), neighbor_sampler, num_neighbors, ddp=ddp, directed=directed,
            replace=replace, subgraph_type=subgraph_type, disjoint=disjoint, seed=seed,
            timeout=timeout, weight_attr=weight_attr, time_attr=time_attr,
            temporal_strategy=temporal_strategy, server_hops=server_hops)
        input_type, nodes, input_id = _input_ids(input_nodes, gs)
        input_time = check_seed_times(input_time, nodes.numel(), time_attr, "input_time")
        self._share_inputs(kwargs, nodes.numel(), neighbor_sampler, ddp=ddp, seed=seed)
        try:
            super().__init__(data=(fs, gs), node_sampler=neighbor_sampler,
                             input_nodes=nodes if input_type is None else (input_type, nodes),
                             input_time=input_time, transform=transform,
                             transform_sampler_output=transform_sampler_output,
                             filter_per_worker=filter_per_worker, custom_cls=custom_cls,
                             input_id=input_id, **kwargs)
        except ValueError as exc:
            # torch's DataLoader checks combinations of its own arguments
            # (batch_sampler with batch_size, ...); same error type as ours.
            raise LoaderError(f"invalid DataLoader arguments: {exc}") from exc

    # Iteration (the seam is pyg_dist.loader.iteration.DistIteration) ######

    def _produce(self, item: tuple[Union[list[int], Tensor], Optional[int]]) -> Data:
        """Samples and fetches one batch (thread-safe)."""
        index, seed = item
        inputs = self.input_data[index]
        # Its node features are fetched right after, on this thread: a tree
        # sampled on the servers may have them written in its round trip.
        with tree_outputs.fetching(self.data[0]):
            if self._seeded:
                out = self.node_sampler.sample_from_nodes(inputs, seed=seed)
            else:
                out = self.node_sampler.sample_from_nodes(inputs)
        return self.filter_fn(out)

    # Joining features #######################################################

    def filter_fn(self, out: Union[SamplerOutput, HeteroSamplerOutput]
                  ) -> Union[Data, HeteroData]:
        """Joins a sampler output with its features into a PyG batch.

        The same as PyG's ``NodeLoader.filter_fn`` for a ``(FeatureStore,
        GraphStore)`` pair, without its special case for a sampler class
        named ``DistNeighborSampler`` (PyG's deprecated one, whose output
        carries the features in ``metadata``), and with the edge attributes
        too, node and edge attributes in one ``multi_get_tensor``
        (:mod:`pyg_dist.loader.batches`).
        """
        if self.transform_sampler_output:
            out = self.transform_sampler_output(out)
        if isinstance(out, HeteroSamplerOutput):
            data = hetero_batch(self.data[0], out, self.custom_cls)
            inputs = data[self.input_data.input_type]
        elif isinstance(out, SamplerOutput):
            data = inputs = data_batch(self.data[0], out, self.custom_cls,
                                       self.node_sampler.edge_permutation)
        else:
            raise LoaderError(f"expected a SamplerOutput or HeteroSamplerOutput from the "
                              f"sampler, got {type(out).__name__}")
        inputs.input_id = out.metadata[0]
        inputs.seed_time = out.metadata[1]
        inputs.batch_size = out.metadata[0].size(0)
        return data if self.transform is None else self.transform(data)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_inputs={self.input_data.node.numel()}, "
                f"batches={len(self)}, rank={self.rank}/{self.world_size}, "
                f"split={self.split}, prefetch={self.prefetch})")


def _input_ids(input_nodes: Any, gs: RemoteGraphStore
               ) -> tuple[Optional[str], Tensor, Optional[Tensor]]:
    """The input node type, the global int64 ids of ``input_nodes`` and the
    ``input_id`` PyG reports for them (the node ids themselves for a mask,
    the positions in the input, ``None``, otherwise).

    ``input_nodes`` is ids, a mask, ``(None, ids)`` or ``None`` (every node)
    on a homogeneous graph; a node type, ``(node_type, ids or mask)`` or
    ``(node_type, None)`` on a heterogeneous one, as in PyG.
    """
    node_type = None
    if isinstance(input_nodes, str):
        node_type, input_nodes = input_nodes, None
    elif isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 \
            and (input_nodes[0] is None or isinstance(input_nodes[0], str)):
        node_type, input_nodes = input_nodes
    elif input_nodes is None and gs.is_hetero:
        node_type = input_nodes  # None: the type check below names the types
    num_nodes = gs.router.num_nodes_of(node_type)  # refuses a wrong or unknown type
    of = "" if node_type is None else f" of node type {node_type!r}"
    if input_nodes is None:
        return node_type, torch.arange(num_nodes), None
    if not isinstance(input_nodes, Tensor):
        input_nodes = torch.as_tensor(input_nodes)
    if input_nodes.dtype == torch.bool:
        if input_nodes.numel() != num_nodes:
            raise LoaderError(f"a boolean input_nodes mask needs one entry per node{of} "
                              f"({num_nodes}), got {input_nodes.numel()}")
        ids = input_nodes.nonzero().view(-1)
        return node_type, ids, ids
    if input_nodes.is_floating_point() or input_nodes.dim() != 1:
        raise LoaderError(f"input_nodes must be 1-D integer ids or a boolean mask, got dtype "
                          f"{input_nodes.dtype} and shape {tuple(input_nodes.shape)}")
    ids = input_nodes.to(torch.long).cpu()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise LoaderError(f"input_nodes holds ids outside [0, {num_nodes}){of}: min "
                          f"{int(ids.min())}, max {int(ids.max())}")
    return node_type, ids, None
