"""The trainer's side of ``sample_tree``: one round trip for a batch's hops.

:func:`sample_tree` sends a batch's seeds, fan-outs and random seed to one
server, which samples every hop with its peers
(:mod:`pyg_dist.server.forwarding`) and answers the relabelled subgraph.
The servers take turns coordinating a sampler's batches; which one answers
does not change the batch, which is bit for bit what
:meth:`~pyg_dist.sampler.DistNeighborSampler.hop_by_hop` draws with the same
seed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput
from torch_geometric.sampler.base import SubgraphType

from pyg_dist.errors import ForwardingError, ProtocolError, RemoteError, SamplerError
from pyg_dist.rpc.ops import SAMPLE_TREE, SAMPLE_TREE_TYPES
from pyg_dist.sampler.sample_settings import seed_times
from pyg_dist.store.remote_sampling import attribute_args

logger = logging.getLogger(__name__)


def server_hops_setting(sampler: Any, server_hops: Optional[bool]) -> bool:
    """Whether ``sampler`` samples with ``sample_tree`` (``sample_tree_types``
    on a heterogeneous graph): ``server_hops`` checked against what the
    servers allow (``None``: when they do).

    Raises:
        SamplerError: if ``server_hops`` is not ``None``/``True``/``False``,
            or ``True`` where the servers do not forward.
    """
    if server_hops not in (None, True, False):
        raise SamplerError(f"server_hops must be None, True or False, got {server_hops!r}")
    able = bool(getattr(sampler.graph_store, "forwarding", False))
    if server_hops and not able:
        raise SamplerError("server_hops=True, but the servers do not forward (start them "
                           "with --peers, or with pyg-dist launch)")
    return able if server_hops is None else bool(server_hops)


def sample_on_servers(sampler: Any, seeds: Tensor, seed_time: Optional[Tensor],
                      seed: Optional[int]) -> SamplerOutput:
    """:func:`sample_tree` of one batch; if its coordinator cannot forward
    (``ForwardingError``), the batch and every later one are sampled hop by
    hop, with one warning in the log."""
    seeds = sampler.graph_store.router.check_ids(seeds.view(-1).cpu(), "seed nodes")
    seed_time = seed_times(sampler, seeds, seed_time)
    base_seed = sampler.draw_seed() if seed is None else int(seed)
    out = _or_hop_by_hop(sampler, lambda: sample_tree(sampler, seeds, seed_time, base_seed))
    return out if out is not None else sampler.hop_by_hop(seeds, seed_time, seed=base_seed)


def sample_types_on_servers(sampler: Any, seeds: dict[str, Tensor],
                            seed_time: Optional[dict[str, Tensor]],
                            seed: Optional[int]) -> HeteroSamplerOutput:
    """:func:`sample_tree_types` of one heterogeneous batch, falling back to
    hop by hop as :func:`sample_on_servers` does."""
    seeds, seed_time = sampler.checked_seed_dict(seeds, seed_time)
    base_seed = sampler.draw_seed() if seed is None else int(seed)
    out = _or_hop_by_hop(
        sampler, lambda: sample_tree_types(sampler, seeds, seed_time, base_seed))
    return out if out is not None else \
        sampler.hop_by_hop_types(seeds, seed_time, seed=base_seed)


def _or_hop_by_hop(sampler: Any, tree: Callable[[], Any]) -> Any:
    """``tree()``, or ``None`` (and the sampler samples hop by hop from now
    on) when the coordinator answered that it cannot forward."""
    try:
        return tree()
    except RemoteError as exc:
        if exc.remote_type != ForwardingError.__name__:
            raise
        logger.warning("the servers cannot sample on their own (%s); sampling hop by hop "
                       "from now on", exc.remote_message or exc)
        sampler.server_hops = False
    return None


def sample_tree_types(sampler: Any, seeds: dict[str, Tensor],
                      seed_time: Optional[dict[str, Tensor]],
                      base_seed: int) -> HeteroSamplerOutput:
    """Samples every hop of a heterogeneous batch on the servers.

    Args:
        sampler: The :class:`~pyg_dist.sampler.DistNeighborSampler`.
        seeds: Checked global ids per node type.
        seed_time: With ``time_attr``, one int64 time per seed of each type.
        base_seed: The batch's random seed.

    Raises:
        RemoteError: as :func:`sample_tree`.
        ProtocolError: if the coordinator names other node types than the
            graph's.
    """
    router = sampler.graph_store.router
    deadline = router.deadline(sampler.timeout)
    types = list(seeds)
    args: dict[str, Any] = {
        "edge_types": [list(t) for t in sampler.num_neighbors],
        "num_neighbors": [list(k) for k in sampler.num_neighbors.values()],
        "seed_types": types, "sizes": [seeds[t].numel() for t in types],
        "seed": int(base_seed), "timeout": deadline, **_flags(sampler)}
    tensors = [torch.cat([seeds[t] for t in types])]
    if seed_time is not None:
        tensors.append(torch.cat([seed_time[t] for t in types]))
    part = next(sampler.coordinators) % router.num_parts
    reply = router.call_all([SAMPLE_TREE_TYPES.request(part, args, tensors)], deadline)[0]
    node_types = reply.result["node_types"]  # checked: names, one node tensor each
    if node_types != list(sampler.graph_store.node_types):
        raise ProtocolError(f"server {router.endpoints[part]} answered node types "
                            f"{node_types[:8]}, the graph has "
                            f"{list(sampler.graph_store.node_types)[:8]}",
                            address=router.endpoints[part], op=SAMPLE_TREE_TYPES.name)
    out = [t.to(torch.long) for t in reply.tensors]
    edge_types = list(sampler.num_neighbors)
    num_types, hops = len(node_types), sampler.num_hops
    node = dict(zip(node_types, out[:num_types]))
    per_edge = out[num_types:num_types + 3 * len(edge_types)]
    per_hop_nodes, per_hop_edges = out[num_types + 3 * len(edge_types):][:2]
    induced = "subgraph" in args
    return HeteroSamplerOutput(
        node=node, row={t: per_edge[3 * i] for i, t in enumerate(edge_types)},
        col={t: per_edge[3 * i + 1] for i, t in enumerate(edge_types)},
        edge={t: per_edge[3 * i + 2] for i, t in enumerate(edge_types)},
        batch=dict(zip(node_types, out[-num_types:])) if sampler.disjoint else None,
        num_sampled_nodes=None if induced else
        dict(zip(node_types, per_hop_nodes.view(num_types, hops + 1).tolist())),
        num_sampled_edges=None if induced else
        dict(zip(edge_types, per_hop_edges.view(len(edge_types), hops).tolist())))


def _flags(sampler: Any) -> dict[str, Any]:
    """The optional arguments of a tree request (those not at their default)."""
    args: dict[str, Any] = {}
    if sampler.replace:
        args["replace"] = True
    if sampler.disjoint:
        args["disjoint"] = True
    if sampler.subgraph_type == SubgraphType.induced:
        args["subgraph"] = "induced"
    args.update(attribute_args(sampler.weight_attr, sampler.time_attr,
                               sampler.temporal_strategy))
    return args


def sample_tree(sampler: Any, seeds: Tensor, seed_time: Optional[Tensor],
                base_seed: int) -> SamplerOutput:
    """Samples every hop around ``seeds`` on the servers.

    Args:
        sampler: The :class:`~pyg_dist.sampler.DistNeighborSampler` (its
            settings, graph store and deadline).
        seeds: Checked global ids of the seeds (int64).
        seed_time: With ``time_attr``, one int64 time per seed.
        base_seed: The batch's random seed.

    Raises:
        RemoteError: as the coordinator answered it (a peer that timed out
            arrives as ``RemoteRpcTimeoutError`` naming that peer; a server
            that does not forward as ``RemoteForwardingError``).
    """
    router = sampler.graph_store.router
    deadline = router.deadline(sampler.timeout)
    args: dict[str, Any] = {"num_neighbors": list(sampler.num_neighbors),
                            "seed": int(base_seed), "timeout": deadline, **_flags(sampler)}
    tensors = [seeds] if seed_time is None else [seeds, seed_time]
    # Batches take turns among the servers (which one coordinates does not
    # change the batch): trees in flight spread evenly over their slots.
    part = next(sampler.coordinators) % router.num_parts
    request = SAMPLE_TREE.request(part, args, tensors)
    # A coordinator on this host writes the subgraph into memory lent for
    # it when its size is bounded (every fan-out >= 0, not induced).
    reply = router.call_all([request], deadline, reply_bytes=[_answer_bound(sampler, seeds)])[0]
    try:
        # Checked against the request (pyg_dist.rpc.ops): indices into the
        # nodes, the seeds first, per-hop counts that add up. Copied out of
        # lent memory, which goes back to the pool on release.
        lent = reply.on_release is not None
        out = [t.to(torch.long) if t.dtype != torch.long else t.clone() if lent else t
               for t in reply.tensors]
    finally:
        reply.release()
    node, row, col, edge, per_hop_nodes, per_hop_edges, *batch = out
    induced = "subgraph" in args
    return SamplerOutput(
        node=node, row=row, col=col, edge=edge, batch=batch[0] if batch else None,
        num_sampled_nodes=None if induced else per_hop_nodes.tolist(),
        num_sampled_edges=None if induced else per_hop_edges.tolist())


def _answer_bound(sampler: Any, seeds: Tensor) -> Optional[int]:
    """Most bytes a ``sample_tree`` answer takes (``k`` neighbours per node
    and hop at most; 8 bytes a node, 16 an edge), or ``None`` when unbounded
    (a fan-out of -1, or an induced subgraph)."""
    fanouts = list(sampler.num_neighbors)
    if sampler.subgraph_type == SubgraphType.induced or any(k < 0 for k in fanouts):
        return None
    frontier = nodes = seeds.numel()
    edges = 0
    for k in fanouts:
        frontier *= k
        nodes, edges = nodes + frontier, edges + frontier
    per_node = 2 if sampler.disjoint else 1  # node ids (and batch)
    return 8 * (per_node * nodes + 2 * edges + 2 * len(fanouts) + 1)
