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
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput
from torch_geometric.sampler.base import SubgraphType

from pyg_dist.errors import ForwardingError, ProtocolError, RemoteError, SamplerError
from pyg_dist.protocol import tree_codec
from pyg_dist.protocol.ops import SAMPLE_TREE, wire_edge_type
from pyg_dist.protocol.tree_codec import tree_answer_bytes
from pyg_dist.sampler.hop_loop import one_type
from pyg_dist.sampler.sample_settings import seed_times
from pyg_dist.store.remote_sampling import attribute_args

logger = logging.getLogger(__name__)


def server_hops_setting(sampler: Any, server_hops: Optional[bool]) -> bool:
    """Whether ``sampler`` samples with ``sample_tree``: ``server_hops`` checked against what the
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


def sample_on_servers(sampler: Any, seeds: Union[Tensor, dict[str, Tensor]],
                      seed_time: Union[Tensor, dict[str, Tensor], None],
                      seed: Optional[int]) -> Union[SamplerOutput, HeteroSamplerOutput]:
    """:func:`sample_tree` of one batch (a homogeneous graph's seeds, or
    seeds per node type); if its coordinator cannot forward
    (``ForwardingError``), the batch and every later one are sampled hop by
    hop, with one warning in the log."""
    typed = isinstance(seeds, dict)
    if typed:
        seeds, seed_time = sampler.checked_seed_dict(seeds, seed_time)
    else:
        seeds = sampler.graph_store.router.check_ids(seeds.view(-1).cpu(), "seed nodes")
        seed_time = seed_times(sampler, seeds, seed_time)
    base_seed = sampler.draw_seed() if seed is None else int(seed)
    try:
        return sample_tree(sampler, seeds, seed_time, base_seed)
    except RemoteError as exc:
        if exc.remote_type != ForwardingError.__name__:
            raise
        logger.warning("the servers cannot sample on their own (%s); sampling hop by hop "
                       "from now on", exc.remote_message or exc)
        sampler.server_hops = False
    hop_by_hop = sampler.hop_by_hop_types if typed else sampler.hop_by_hop
    return hop_by_hop(seeds, seed_time, seed=base_seed)


def sample_tree(sampler: Any, seeds: Union[Tensor, dict[str, Tensor]],
                seed_time: Union[Tensor, dict[str, Tensor], None],
                base_seed: int) -> Union[SamplerOutput, HeteroSamplerOutput]:
    """Samples every hop of a batch on the servers: a homogeneous graph's
    as the one-type case of a heterogeneous one (node and edge type nil).

    Args:
        sampler: The :class:`~pyg_dist.sampler.DistNeighborSampler` (its
            settings, graph store and deadline).
        seeds: Checked global ids of the seeds (int64), per node type on a
            heterogeneous graph.
        seed_time: With ``time_attr``, one int64 time per seed (likewise).
        base_seed: The batch's random seed.

    Raises:
        RemoteError: as the coordinator answered it (a peer that timed out
            arrives as ``RemoteRpcTimeoutError`` naming that peer; a server
            that does not forward as ``RemoteForwardingError``).
        ProtocolError: if the coordinator names other node types than the
            graph's.
    """
    router = sampler.graph_store.router
    deadline = router.deadline(sampler.timeout)
    typed = isinstance(seeds, dict)
    seeds_of = seeds if typed else {None: seeds}
    times_of = seed_time if typed or seed_time is None else {None: seed_time}
    fanouts = sampler.num_neighbors if typed else {None: sampler.num_neighbors}
    types = list(seeds_of)
    args: dict[str, Any] = {
        "edge_types": [wire_edge_type(t) for t in fanouts],
        "num_neighbors": [list(k) for k in fanouts.values()],
        "seed_types": types, "sizes": [seeds_of[t].numel() for t in types],
        "seed": int(base_seed), "timeout": deadline, **_flags(sampler)}
    tensors = [torch.cat([seeds_of[t] for t in types])]
    if times_of is not None:
        tensors.append(torch.cat([times_of[t] for t in types]))
    # Batches take turns among the servers (which one coordinates does not
    # change the batch): trees in flight spread evenly over their slots.
    part = next(sampler.coordinators) % router.num_parts
    # A coordinator on this host writes the subgraph into memory lent for
    # it when its size is bounded (every fan-out >= 0, not induced).
    bound = None if typed or "subgraph" in args else \
        tree_answer_bytes(seeds.numel(), list(sampler.num_neighbors), sampler.disjoint)
    reply = router.call_all([SAMPLE_TREE.request(part, args, tensors)], deadline,
                            reply_bytes=[bound])[0]
    try:
        node_types = reply.result["node_types"]  # checked: one node tensor each
        expected = list(sampler.graph_store.node_types) if typed else [None]
        if node_types != expected:
            raise ProtocolError(f"server {router.endpoints[part]} answered node types "
                                f"{node_types[:8]}, the graph has {expected[:8]}",
                                address=router.endpoints[part], op=SAMPLE_TREE.name)
        # Checked against the request (pyg_dist.protocol.tree_codec.check):
        # indices into the nodes, the seeds first, per-hop counts that add
        # up. Copied out of lent memory, which goes back to the pool on
        # release.
        lent = reply.on_release is not None
        out = [t.to(torch.long) if t.dtype != torch.long else t.clone() if lent else t
               for t in reply.tensors]
    finally:
        reply.release()
    tree = tree_codec.decode(args, reply.result, out)
    return tree if typed else one_type(tree)


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
