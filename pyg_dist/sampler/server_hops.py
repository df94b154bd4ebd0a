"""The trainer's side of ``sample_tree``: one round trip for a batch's hops.

:func:`sample_tree` sends a batch's seeds, fan-outs and random seed to one
server, which samples every hop with its peers
(:mod:`pyg_dist.server.forwarding`) and answers the relabelled subgraph.
The servers take turns coordinating a sampler's batches; which one answers
does not change the batch, which is bit for bit what
:meth:`~pyg_dist.sampler.DistNeighborSampler.hop_by_hop` draws with the same
seed.

A homogeneous tree comes with its nodes grouped by owning part
(:mod:`pyg_dist.protocol.tree_owners`), remembered for the batch's feature
fetch (:mod:`pyg_dist.store.known_owners`); inside a loader's fetch
(:mod:`pyg_dist.store.tree_outputs`), with its nodes' rows already written
into the batch's outputs by their owners (:mod:`pyg_dist.protocol.tree_rows`).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput
from torch_geometric.typing import EdgeType, NodeType

from pyg_dist.errors import ProtocolError
from pyg_dist.hops.settings import HopSettings
from pyg_dist.protocol import tree_codec, tree_owners
from pyg_dist.protocol.ops import SAMPLE_TREE, wire_edge_type
from pyg_dist.routing.id_router import Router
from pyg_dist.rpc.retrying import FirstAttempt
from pyg_dist.store import known_owners, tree_outputs


def sample_tree(router: Router, part: int, settings: HopSettings,
                fanouts: dict[Optional[EdgeType], list[int]],
                graph_node_types: list[Optional[NodeType]],
                seeds: dict[Optional[NodeType], Tensor],
                seed_time: Optional[dict[Optional[NodeType], Tensor]],
                base_seed: int) -> HeteroSamplerOutput:
    """Samples every hop of a batch on the servers: a homogeneous graph's
    as the one-type case of a heterogeneous one (node and edge type nil);
    inside :func:`pyg_dist.store.tree_outputs.fetching`, its nodes' rows are
    written into the batch's outputs during the same round trip, when the
    feature store can lend them.

    Args:
        router: Routes to the servers.
        part: The server that coordinates this batch.
        settings: How the hops are sampled (and the deadline).
        fanouts: Per edge type, in the graph's order, its fan-out per hop.
        graph_node_types: The graph's node types (``[None]``: homogeneous).
        seeds: Checked global ids of the seeds (int64) per node type.
        seed_time: With ``time_attr``, one int64 time per seed (likewise).
        base_seed: The batch's random seed.

    Raises:
        RemoteError: as the coordinator answered it (a peer that timed out
            arrives as ``RemoteRpcTimeoutError`` naming that peer; a server
            that does not forward as ``RemoteForwardingError``).
        ProtocolError: if the coordinator names other node types than the
            graph's.
    """
    deadline = router.deadline(settings.timeout)
    typed = graph_node_types != [None]
    types = list(seeds)
    args: dict[str, Any] = {
        "edge_types": [wire_edge_type(t) for t in fanouts],
        "num_neighbors": [list(k) for k in fanouts.values()],
        "seed_types": types, "sizes": [seeds[t].numel() for t in types],
        "seed": int(base_seed), "timeout": deadline, **_flags(settings)}
    if not typed:  # its nodes grouped by owner: the feature fetch needs no lookup
        args["owners"] = True
    tensors = [torch.cat([seeds[t] for t in types])]
    if seed_time is not None:
        tensors.append(torch.cat([seed_time[t] for t in types]))
    # A coordinator on this host writes the subgraph into memory lent for
    # it when its size is bounded (every fan-out >= 0, not induced).
    bound = None if typed or settings.induced else \
        tree_codec.tree_answer_bytes(seeds[None].numel(), fanouts[None], settings.disjoint)
    rows = None if typed else tree_outputs.planned(
        router, part, seeds[None].numel(), tree_codec.tree_node_bound(
            seeds[None].numel(), fanouts[None], settings.disjoint, router.num_nodes))
    first = None if rows is None else \
        FirstAttempt({**args, "rows": rows.arg()}, tensors, rows.given_up)
    try:
        reply = router.call_all([SAMPLE_TREE.request(part, args, tensors)], deadline,
                                reply_bytes=[bound], first=[first])[0]
    except BaseException:
        if rows is not None:
            rows.failed()
        raise
    try:
        node_types = reply.result["node_types"]  # checked: one node tensor each
        expected = list(graph_node_types)
        if node_types != expected:
            raise ProtocolError(f"server {router.endpoints[part]} answered node types "
                                f"{node_types[:8]}, the graph has {expected[:8]}",
                                address=router.endpoints[part], op=SAMPLE_TREE.name)
        counts = reply.result.get("owner_counts")
        if not typed and len(counts) != router.book.num_parts:
            # Checked to add up, but a part past the book's would name a
            # server that does not exist when the rows are fetched.
            raise ProtocolError(f"server {router.endpoints[part]} counted nodes for "
                                f"{len(counts)} parts, the graph has {router.book.num_parts}",
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
    if not tree_owners.asked(args):
        return tree_codec.decode(args, reply.result, out)
    sample = tree_codec.decode(args, reply.result, out[:-1])
    node = sample.node[None]
    tree_outputs.saw(router, seeds[None].numel(), node.numel())
    # Checked (tree_rows.check) when the answer is the first attempt's, the
    # one that asked for rows; a re-send's answer is not read for them.
    written = reply.result.get("rows") if rows is not None and rows.lent else None
    outputs = None if written is None else rows.settle(written, node.numel())
    known_owners.remember(node, tree_owners.shares_of(node, reply.result["owner_counts"],
                                                      out[-1]),
                          None if outputs is None else dict(zip(rows.attrs, outputs)))
    return sample


def _flags(settings: HopSettings) -> dict[str, Any]:
    """The optional arguments of a tree request (those not at their default)."""
    args: dict[str, Any] = {}
    if settings.replace:
        args["replace"] = True
    if settings.disjoint:
        args["disjoint"] = True
    if settings.induced:
        args["subgraph"] = "induced"
    args.update(settings.attribute_args())
    return args
