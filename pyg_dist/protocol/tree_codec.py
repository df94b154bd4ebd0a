"""``sample_tree``'s reply: its layout, written once.

The coordinator encodes a batch's subgraph (:func:`encode`,
:mod:`pyg_dist.server.forwarding`), the trainer's retry layer checks the
reply against the request (:func:`check`, the op's reply check in
:mod:`pyg_dist.protocol.ops`) and the trainer decodes it (:func:`decode`,
:mod:`pyg_dist.sampler.server_hops`); all three read the order of the
tensors from :class:`TreeLayout`:

* per node type (``result["node_types"]``; ``[nil]`` for a homogeneous
  graph) its ``node`` (global ids, its seeds first);
* per edge type, in the request's order (nil joins the nil node type to
  itself), ``row``, ``col`` (int32 indices into its source's and its
  destination's nodes: a third of the bytes saved) and ``edge``;
* the per-hop node counts (node type after node type, hops + 1 each) and
  edge counts (edge type after edge type, hops each), both empty for an
  induced subgraph;
* when disjoint, per node type its ``batch``.

All 1-D, int64 but ``row`` and ``col``. A homogeneous graph's reply is thus
``node``, ``row``, ``col``, ``edge``, ``num_sampled_nodes``,
``num_sampled_edges`` (and ``batch``): protocol version 2's layout.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

import torch
from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput

from pyg_dist.partitioning.file_names import edge_ends
from pyg_dist.protocol.reply_checks import bounds, count_problem, ids_of, shape_text
from pyg_dist.rpc.wire_values import describe


class TreeLayout(NamedTuple):
    """Where each part of a tree reply lies among its tensors.

    Args:
        node_types: Every node type answered, in the reply's order.
        edge_types: The request's edge types (``None``, or ``(src, rel,
            dst)``), in its order.
        disjoint: Whether the reply ends with a ``batch`` per node type.
    """

    node_types: list
    edge_types: list
    disjoint: bool

    @property
    def count(self) -> int:
        """How many tensors the reply holds."""
        nodes = len(self.node_types)
        return nodes * (2 if self.disjoint else 1) + 3 * len(self.edge_types) + 2

    @property
    def per_hop(self) -> int:
        """Index of the per-hop node counts (the edge counts follow)."""
        return len(self.node_types) + 3 * len(self.edge_types)

    def edge(self, i: int) -> int:
        """Index of edge type ``i``'s ``row`` (``col`` and ``edge`` follow)."""
        return len(self.node_types) + 3 * i

    def dtypes(self) -> list[torch.dtype]:
        """Every tensor's dtype, in order: row and col index into the
        nodes, int32; the rest int64."""
        return [torch.int64] * len(self.node_types) + \
            [torch.int32, torch.int32, torch.int64] * len(self.edge_types) + \
            [torch.int64] * (self.count - self.per_hop)


def edge_types_of(args: dict[str, Any]) -> list:
    """A tree request's edge types as the reply is keyed (``None`` or a
    tuple; msgpack sends lists)."""
    return [None if t is None else tuple(t) for t in args["edge_types"]]


def encode(out: HeteroSamplerOutput, edge_types: list) -> tuple[dict[str, Any], list[Tensor]]:
    """A sampled subgraph as ``sample_tree``'s ``(result, tensors)``.

    Args:
        out: The batch, keyed by type (a homogeneous graph's node and edge
            type ``None``); ``num_sampled_nodes`` ``None`` for an induced
            subgraph.
        edge_types: The request's edge types, in its order.
    """
    node_types = list(out.node)
    layout = TreeLayout(node_types, list(edge_types), out.batch is not None)
    answer = [out.node[t] for t in node_types]
    for edge_type in edge_types:
        answer += [out.row[edge_type], out.col[edge_type], out.edge[edge_type]]
    induced = out.num_sampled_nodes is None
    answer += [_counts(None if induced else
                       [n for t in node_types for n in out.num_sampled_nodes[t]]),
               _counts(None if induced else
                       [n for t in edge_types for n in out.num_sampled_edges[t]])]
    if layout.disjoint:
        answer += [out.batch[t] for t in node_types]
    return {"node_types": node_types}, [t.to(d) for t, d in zip(answer, layout.dtypes())]


def decode(args: dict[str, Any], result: dict[str, Any], tensors: list[Tensor]
           ) -> HeteroSamplerOutput:
    """A checked reply (:func:`check`) to the tree request ``args`` as the
    batch, keyed by type; the tensors as given (the caller casts or copies
    them)."""
    layout = TreeLayout(result["node_types"], edge_types_of(args), args.get("disjoint") is True)
    node_types, edge_types = layout.node_types, layout.edge_types
    induced = args.get("subgraph") == "induced"
    hops = len(args["num_neighbors"][0]) if args["num_neighbors"] else 0
    nodes, edges = tensors[layout.per_hop:layout.per_hop + 2]
    return HeteroSamplerOutput(
        node=dict(zip(node_types, tensors[:len(node_types)])),
        row={t: tensors[layout.edge(i)] for i, t in enumerate(edge_types)},
        col={t: tensors[layout.edge(i) + 1] for i, t in enumerate(edge_types)},
        edge={t: tensors[layout.edge(i) + 2] for i, t in enumerate(edge_types)},
        batch=dict(zip(node_types, tensors[layout.per_hop + 2:])) if layout.disjoint
        else None,
        num_sampled_nodes=None if induced else
        dict(zip(node_types, nodes.view(len(node_types), hops + 1).tolist())),
        num_sampled_edges=None if induced else
        dict(zip(edge_types, edges.view(len(edge_types), hops).tolist())))


def check(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
          reply: list[Tensor]) -> Optional[str]:
    """``None``, or what is wrong with a tree reply: its tensors' count,
    dimensions and dtypes as laid out; every type's nodes starting with its
    seeds; ``row`` and ``col`` within their types' nodes; per-hop counts
    that add up to the nodes and edges of every type, its seeds first; one
    ``batch`` entry per node, when disjoint."""
    node_types = result.get("node_types")
    if not isinstance(node_types, list) or \
            not all(t is None or isinstance(t, str) for t in node_types):
        return f"node types {describe(node_types)}"
    layout = TreeLayout(node_types, edge_types_of(args), args.get("disjoint") is True)
    problem = count_problem(layout.count, reply)
    if problem is not None:
        return problem
    dtypes = layout.dtypes()
    if any(t.dim() != 1 or t.dtype != d for t, d in zip(reply, dtypes)):
        return (f"tensors {[shape_text(t) for t in reply][:8]}, where 1-D ones of "
                f"{[str(d) for d in dtypes][:8]} were due")
    nodes = dict(zip(node_types, reply[:len(node_types)]))
    seeds = dict(zip(args["seed_types"], args.get("sizes", [ids_of(tensors)])))
    problem = _seeds_first(nodes, seeds, tensors[0]) or _edges_within(layout, nodes, reply)
    if problem is not None:
        return problem
    if layout.disjoint and any(b.numel() != nodes[t].numel()
                               for t, b in zip(node_types, reply[layout.per_hop + 2:])):
        return "batch entries that do not match the nodes of their type"
    return _per_hop_problem(args, layout, nodes, seeds, reply)


def _seeds_first(nodes: dict, seeds: dict, seed_ids: Tensor) -> Optional[str]:
    start = 0
    for node_type, size in seeds.items():
        node = nodes.get(node_type)
        if node is None or node.numel() < size or \
                not torch.equal(node[:size], seed_ids[start:start + size]):
            return f"{describe(node_type)} nodes that do not start with its {size} seeds"
        start += size
    return None


def _edges_within(layout: TreeLayout, nodes: dict, reply: list[Tensor]) -> Optional[str]:
    for i, edge_type in enumerate(layout.edge_types):
        row, col, edge = reply[layout.edge(i):layout.edge(i) + 3]
        src, dst = edge_ends(edge_type)
        if src not in nodes or dst not in nodes:
            return f"no nodes of {describe(src)} or {describe(dst)} for edge type {edge_type}"
        if row.numel() != col.numel() or row.numel() != edge.numel():
            return f"{row.numel()} rows, {col.numel()} columns and {edge.numel()} edge ids"
        for name, index, node_type in (("row", row, src), ("col", col, dst)):
            low, high = bounds(index)
            if index.numel() and not 0 <= low <= high < nodes[node_type].numel():
                return f"{name} entries of {edge_type} outside its {describe(node_type)} nodes"
    return None


def _per_hop_problem(args: dict[str, Any], layout: TreeLayout, nodes: dict, seeds: dict,
                     reply: list[Tensor]) -> Optional[str]:
    per_hop_nodes, per_hop_edges = reply[layout.per_hop:layout.per_hop + 2]
    if args.get("subgraph") == "induced":
        return None if not per_hop_nodes.numel() and not per_hop_edges.numel() else \
            "per-hop counts for an induced subgraph"
    node_types, num_edge_types = layout.node_types, len(layout.edge_types)
    hops = len(args["num_neighbors"][0]) if args["num_neighbors"] else 0
    if per_hop_nodes.numel() != len(node_types) * (hops + 1) or \
            per_hop_edges.numel() != num_edge_types * hops:
        return (f"{per_hop_nodes.numel()} per-hop node and {per_hop_edges.numel()} edge "
                f"counts for {len(node_types)} node and {num_edge_types} edge types over "
                f"{hops} hops")
    per_type = per_hop_nodes.view(len(node_types), hops + 1)
    edge_counts = [reply[layout.edge(i)].numel() for i in range(num_edge_types)]
    if per_type.sum(1).tolist() != [nodes[t].numel() for t in node_types] or \
            per_hop_edges.view(num_edge_types, hops).sum(1).tolist() != edge_counts or \
            per_type[:, 0].tolist() != [seeds.get(t, 0) for t in node_types]:
        return "per-hop counts that do not add up to the nodes and edges of every type"
    return None


def tree_bytes(nodes: int, edges: int, hops: int, disjoint: bool) -> int:
    """Bytes of a homogeneous ``sample_tree`` answer of ``nodes`` nodes and
    ``edges`` edges over ``hops`` hops: an int64 id (and batch entry, when
    disjoint) per node, int32 row and col and an int64 id per edge, the
    per-hop counts."""
    return 8 * ((2 if disjoint else 1) * nodes + 2 * hops + 1) + 16 * edges


def tree_answer_bytes(seeds: int, fanouts: Sequence[int], disjoint: bool, *,
                      graph: Optional[tuple[int, int]] = None, replace: bool = False,
                      induced: bool = False) -> Optional[int]:
    """Most bytes a ``sample_tree`` answer takes (:func:`tree_bytes`), the
    bound a trainer lends memory for and a coordinator charges a tree: per
    hop, every frontier node takes at most ``k`` new nodes and edges
    (``fanouts``: each hop's ``k`` over every edge type, ``-1``: all).

    Without ``graph`` (its ``(num_nodes, num_edges)``) the bound is
    ``None`` where it is unbounded (``-1``, or ``induced``: every edge among
    the sampled nodes). With it, a hop takes at most every edge (unless
    ``replace``d) and reaches at most every node, once per seed when
    ``disjoint`` (then the answer also holds a batch entry per node).
    """
    if graph is None:
        if induced or any(k < 0 for k in fanouts):
            return None
        graph = (sys.maxsize, sys.maxsize)
    num_nodes, num_edges = graph
    copies = seeds if disjoint else 1
    frontier = nodes = seeds
    edges = 0
    for k in fanouts:
        hop = copies * num_edges if k < 0 else frontier * k
        if not replace:
            hop = min(hop, copies * num_edges)
        frontier = min(hop, copies * num_nodes)
        nodes, edges = nodes + frontier, edges + hop
    if induced:
        edges = min(nodes * nodes, num_edges)
    return tree_bytes(nodes, edges, len(fanouts), disjoint)


def tree_node_bound(seeds: int, fanouts: Sequence[int], disjoint: bool,
                    num_nodes: int) -> Optional[int]:
    """Most nodes a homogeneous tree of ``seeds`` seeds can have: ``k``
    new nodes per frontier node and hop (``None`` where a fan-out is -1),
    at most the graph's ``num_nodes`` unless ``disjoint`` (then one copy per
    seed)."""
    if any(k < 0 for k in fanouts):
        return None
    nodes = frontier = seeds
    for k in fanouts:
        frontier *= k
        nodes += frontier
    return nodes if disjoint else min(nodes, num_nodes)


def _counts(values: Optional[list[int]]) -> Tensor:
    """Per-hop counts as a tensor (empty when there are none)."""
    return torch.tensor(values if values is not None else [], dtype=torch.long)
