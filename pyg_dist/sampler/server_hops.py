"""The trainer's side of ``sample_tree``: one round trip for a batch's hops.

:func:`sample_tree` sends a batch's seeds, fan-outs and random seed to one
server, which samples every hop with its peers
(:mod:`pyg_dist.server.forwarding`) and answers the relabelled subgraph.
The coordinator is chosen by the batch's seed, so that batches spread over
the servers; which one answers does not change the batch, which is bit for
bit what :meth:`~pyg_dist.sampler.DistNeighborSampler.hop_by_hop` draws with
the same seed.
"""

from __future__ import annotations

from typing import Any, Optional

from torch import Tensor
from torch_geometric.sampler import SamplerOutput
from torch_geometric.sampler.base import SubgraphType

from pyg_dist.rpc.ops import SAMPLE_TREE
from pyg_dist.store.remote_sampling import attribute_args


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
                            "seed": int(base_seed), "timeout": deadline}
    if sampler.replace:
        args["replace"] = True
    if sampler.disjoint:
        args["disjoint"] = True
    if sampler.subgraph_type == SubgraphType.induced:
        args["subgraph"] = "induced"
    args.update(attribute_args(sampler.weight_attr, sampler.time_attr,
                               sampler.temporal_strategy))
    tensors = [seeds] if seed_time is None else [seeds, seed_time]
    part = int(base_seed) % router.num_parts
    request = SAMPLE_TREE.request(part, args, tensors)
    # A coordinator on this host writes the subgraph into memory lent for
    # it when its size is bounded (every fan-out >= 0, not induced).
    reply = router.call_all([request], deadline, reply_bytes=[_answer_bound(sampler, seeds)])[0]
    try:
        # Checked against the request (pyg_dist.rpc.ops): indices into the
        # nodes, the seeds first, per-hop counts that add up. Copied out of
        # lent memory, which goes back to the pool on release.
        out = [t.clone() if reply.on_release is not None else t for t in reply.tensors]
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
    and hop at most), or ``None`` when unbounded (a fan-out of -1, or an
    induced subgraph)."""
    fanouts = list(sampler.num_neighbors)
    if sampler.subgraph_type == SubgraphType.induced or any(k < 0 for k in fanouts):
        return None
    frontier = nodes = seeds.numel()
    edges = 0
    for k in fanouts:
        frontier *= k
        nodes, edges = nodes + frontier, edges + frontier
    per_node = 2 if sampler.disjoint else 1  # node ids (and batch)
    return 8 * (per_node * nodes + 3 * edges + 2 * len(fanouts) + 1)
