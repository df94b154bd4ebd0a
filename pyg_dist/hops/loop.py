"""The hop loop: neighbour sampling over a graph's edge types, hop by hop.

One loop for every graph: a homogeneous graph is the one-type case (node
type ``None``, edge type ``None``; :func:`one_type` unwraps it into PyG's
``SamplerOutput``), and for every caller: it takes the per-hop sampling
function, the trainer's graph store's
(:meth:`~pyg_dist.store.remote_graph_store.RemoteGraphStore.sample_hop`) or a
coordinating server's over its peers (:mod:`pyg_dist.server.forwarding`),
both :func:`~pyg_dist.hops.one_hop.sample_hop` over a router. The
semantics are those of PyG's ``NeighborSampler`` (torch-sparse's and
pyg-lib's ``neighbor_sample`` and ``hetero_neighbor_sample``):

* nodes are numbered per node type; the seeds are nodes of the input type;
* every hop, every edge type ``(src, rel, dst)`` samples in-neighbours (of
  type ``src``) for the ``dst`` nodes that the *previous* hop added (the
  seeds at hop 0), with that edge type's fan-out for the hop; nodes added
  while a hop runs wait for the next one;
* a node gets its local id (per type) when it is first seen, seeds first;
  ``row`` holds local ``src`` ids, ``col`` local ``dst`` ids, ``edge`` the
  global edge ids of each edge type.

At full fan-out the node set of every type and the edge set of every edge
type equal PyG's on the unpartitioned graph. One hop costs one round trip:
the requests of every edge type to every server fly together.
Disjoint (and so temporal) sampling keys a node by ``(seed, id)`` as the
homogeneous sampler does, per node type. ``subgraph_type="induced"`` asks
once more for the sampled nodes' whole neighbourhoods and keeps every edge
between sampled nodes, as PyG does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput
from torch_geometric.typing import EdgeType, NodeType

from pyg_dist.errors import ForwardingError
from pyg_dist.hops.one_hop import Frontier
from pyg_dist.hops.relabel import node_index
from pyg_dist.hops.settings import HopSettings
from pyg_dist.partitioning.file_names import edge_ends

SampleHop = Callable[[Sequence[Frontier], Union[int, Sequence[int]], int, HopSettings],
                     list[tuple[Tensor, Tensor, Tensor]]]
"""One hop on the servers owning its frontiers: ``(frontiers, fan-outs,
hop seed, settings) -> (counts, neighbours, edge ids)`` per frontier, in
its order (:func:`pyg_dist.hops.one_hop.sample_hop` over a router)."""


def sample_hops(sample_hop: SampleHop, settings: HopSettings,
                sizes: dict[Optional[NodeType], int],
                fanouts: dict[Optional[EdgeType], list[int]],
                seeds: dict[Optional[NodeType], Tensor],
                seed_time: Optional[dict[Optional[NodeType], Tensor]],
                base_seed: int, max_edges: Optional[int] = None) -> HeteroSamplerOutput:
    """Samples every hop around ``seeds`` (checked global ids per node type).

    Args:
        sample_hop: Samples one hop (the trainer's graph store's, or a
            coordinating server's over its peers).
        settings: ``replace``, ``disjoint``, the subgraph kind, the weight
            and time attributes, the deadline and every hop's seed.
        sizes: Nodes of every node type of the graph (``{None: n}`` on a
            homogeneous graph), in the graph's order.
        fanouts: Per edge type (``None`` on a homogeneous graph), its
            fan-out per hop; every list as long as the number of hops.
        seeds: Seed nodes per node type: the input type's for node
            sampling, both endpoint types' for link sampling. In disjoint
            mode seed ``i`` of every type roots tree ``i`` (a link's two
            endpoints share their tree, as in PyG).
        seed_time: With ``time_attr``, one int64 time per seed of each type
            (the endpoints of one tree have the same time), else ``None``.
        base_seed: The batch's random seed; every hop derives its own.
        max_edges: Stop with :class:`~pyg_dist.errors.ForwardingError` once
            the hops so far sampled more edges (a coordinating server's
            bound: its answer must fit in one reply).

    Returns:
        A ``HeteroSamplerOutput`` with every node and edge type (empty where
        nothing was sampled), ``num_sampled_nodes`` per node type and hop and
        ``num_sampled_edges`` per edge type and hop; keyed by ``None`` on a
        homogeneous graph.
    """
    num_hops = len(next(iter(fanouts.values())))
    num_trees = max(v.numel() for v in seeds.values())
    disjoint = settings.disjoint
    empty = torch.empty(0, dtype=torch.long)
    root_time = None
    if seed_time is not None:
        # Every tree's time, from the type that roots every tree.
        root_time = next(seed_time[t] for t in seeds if seeds[t].numel() == num_trees)

    def space(node_type: NodeType) -> int:
        return num_trees * sizes[node_type] if disjoint else sizes[node_type]

    def seed_keys(node_type: NodeType) -> Tensor:
        ids = seeds.get(node_type, empty)
        return torch.arange(ids.numel()) * sizes[node_type] + ids if disjoint else ids

    frontier_keys = {t: seed_keys(t) for t in sizes}
    index = {t: node_index(frontier_keys[t], space(t)) for t in sizes}
    frontier_local = {t: torch.arange(frontier_keys[t].numel()) for t in sizes}
    chunks: dict[NodeType, list[Tensor]] = {t: [frontier_keys[t]] for t in sizes}
    num_sampled_nodes = {t: [frontier_keys[t].numel()] for t in sizes}
    rows: dict[Optional[EdgeType], list[Tensor]] = {t: [] for t in fanouts}
    cols: dict[Optional[EdgeType], list[Tensor]] = {t: [] for t in fanouts}
    edges: dict[Optional[EdgeType], list[Tensor]] = {t: [] for t in fanouts}
    num_sampled_edges: dict[Optional[EdgeType], list[int]] = {t: [] for t in fanouts}

    for hop in range(num_hops):
        asked = []
        for edge_type, per_hop in fanouts.items():
            _, dst = edge_ends(edge_type)
            if per_hop[hop] == 0 or frontier_keys[dst].numel() == 0:
                num_sampled_edges[edge_type].append(0)
                continue
            n = sizes[dst]
            ids = frontier_keys[dst] % n if disjoint else frontier_keys[dst]
            times = None if root_time is None else root_time[frontier_keys[dst] // n]
            asked.append((edge_type, ids, times, per_hop[hop]))
        answers = sample_hop(
            [(t, ids, times) for t, ids, times, _ in asked], [k for *_, k in asked],
            settings.hop_seed(base_seed, hop), settings) if asked else []
        before = {t: index[t].num_nodes for t in sizes}
        new_keys: dict[NodeType, list[Tensor]] = {t: [] for t in sizes}
        for (edge_type, *_), (counts, nbrs, eids) in zip(asked, answers):
            src, dst = edge_ends(edge_type)
            counts = counts.to(torch.long)
            total = int(counts.sum())
            if disjoint:
                roots = frontier_keys[dst] // sizes[dst]
                nbrs = nbrs + (roots * sizes[src]).repeat_interleave(counts, output_size=total)
            local, added = index[src].add(nbrs)
            rows[edge_type].append(local)
            cols[edge_type].append(
                frontier_local[dst].repeat_interleave(counts, output_size=total))
            edges[edge_type].append(eids.to(torch.long))
            new_keys[src].append(added)
            num_sampled_edges[edge_type].append(total)
        if max_edges is not None:
            total = sum(sum(v) for v in num_sampled_edges.values())
            if total > max_edges:
                raise ForwardingError(
                    f"the batch's first {hop + 1} hops sampled {total} edges, more than one "
                    f"reply holds ({max_edges}); sample it hop by hop")
        for t in sizes:
            added = torch.cat(new_keys[t]) if new_keys[t] else empty
            frontier_local[t] = torch.arange(before[t], index[t].num_nodes)
            frontier_keys[t] = added
            chunks[t].append(added)
            num_sampled_nodes[t].append(added.numel())

    node, batch = {}, {} if disjoint else None
    for t in sizes:
        node_keys = torch.cat(chunks[t])
        node[t] = node_keys % sizes[t] if disjoint else node_keys
        if disjoint:
            batch[t] = node_keys // sizes[t]
    row = {t: torch.cat(v) if v else empty for t, v in rows.items()}
    col = {t: torch.cat(v) if v else empty for t, v in cols.items()}
    edge = {t: torch.cat(v) if v else empty for t, v in edges.items()}
    if settings.induced:
        row, col, edge = _induced_edges(sample_hop, settings, list(fanouts), node, index,
                                        settings.hop_seed(base_seed, num_hops))
        num_sampled_nodes = num_sampled_edges = None  # no hop structure, as in PyG
    return HeteroSamplerOutput(node=node, row=row, col=col, edge=edge, batch=batch,
                               num_sampled_nodes=num_sampled_nodes,
                               num_sampled_edges=num_sampled_edges)


def _induced_edges(sample_hop: SampleHop, settings: HopSettings,
                   edge_types: list[Optional[EdgeType]],
                   node: dict[Optional[NodeType], Tensor], index: dict[Optional[NodeType], Any],
                   seed: int) -> tuple[dict, dict, dict]:
    """Every edge of every edge type whose two endpoints were sampled: one
    more round trip asks for the whole in-neighbourhood of every sampled
    node (per edge type, its destinations) and keeps the sampled sources."""
    asked = [t for t in edge_types if node[edge_ends(t)[1]].numel()]
    # Whole neighbourhoods: no replacement, weights or times.
    answers = sample_hop([(t, node[edge_ends(t)[1]], None) for t in asked], -1, seed,
                         HopSettings(timeout=settings.timeout))
    empty = torch.empty(0, dtype=torch.long)
    row = {t: empty for t in edge_types}
    col = {t: empty for t in edge_types}
    edge = {t: empty for t in edge_types}
    for edge_type, (counts, nbrs, eids) in zip(asked, answers):
        counts, (src, dst) = counts.to(torch.long), edge_ends(edge_type)
        dst_local = torch.arange(node[dst].numel()).repeat_interleave(
            counts, output_size=nbrs.numel())
        src_local, found = index[src].lookup(nbrs.to(torch.long))
        row[edge_type], col[edge_type] = src_local[found], dst_local[found]
        edge[edge_type] = eids.to(torch.long)[found]
    return row, col, edge


def one_type(out: HeteroSamplerOutput) -> SamplerOutput:
    """A homogeneous graph's subgraph: the one type (``None``, node and edge
    type alike) of the typed loop's output ``out``."""
    return SamplerOutput(
        node=out.node[None], row=out.row[None], col=out.col[None], edge=out.edge[None],
        batch=None if out.batch is None else out.batch[None],
        num_sampled_nodes=None if out.num_sampled_nodes is None else
        out.num_sampled_nodes[None],
        num_sampled_edges=None if out.num_sampled_edges is None else
        out.num_sampled_edges[None])
