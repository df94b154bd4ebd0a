"""How the reply of each op relates to its request: tensor counts, dtypes,
lengths that must agree, indices that must point inside what was answered.

:mod:`pyg_dist.rpc.ops` names one of these per op (``OpSpec.reply_check``);
the retry layer runs it on every reply before a caller sees it. Each
returns ``None`` or what is wrong, in words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.rpc.wire_values import describe

ReplyCheck = Callable[[dict[str, Any], list[Tensor], dict[str, Any], list[Tensor]],
                      Optional[str]]
"""``check(args, tensors, result, reply_tensors) -> None`` or what is wrong."""


def _shape(t: Tensor) -> str:
    return f"{t.dtype} of shape {list(t.shape)}"


def _count(expected: int, tensors: list[Tensor]) -> Optional[str]:
    if len(tensors) != expected:
        return f"{len(tensors)} tensors, where {expected} were due"
    return None


def _rows(tensors: list[Tensor], num_rows: int) -> Optional[str]:
    for t in tensors:
        if t.dim() < 1 or t.shape[0] != num_rows:
            return f"a tensor {_shape(t)}, where {num_rows} rows were asked for"
    return None


def _ids_of(tensors: list[Tensor]) -> int:
    return tensors[0].numel() if tensors else 0


def _hops(num_seeds: Sequence[int], fan_outs: Sequence[int], replace: bool,
          reply: list[Tensor]) -> Optional[str]:
    """Per entry, ``counts`` (one per seed, none negative, none over the
    fan-out) then neighbour and edge ids (as many as the counts add up to,
    none negative; without replacement no edge twice for one seed), all 1-D
    integers. A lying peer's values must not reach a batch, nor make its
    reader allocate what it was not asked for."""
    problem = _count(3 * len(num_seeds), reply)
    if problem is not None:
        return problem
    for i, (seeds, k) in enumerate(zip(num_seeds, fan_outs)):
        counts, nbrs, eids = reply[3 * i: 3 * i + 3]
        if any(t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool
               for t in (counts, nbrs, eids)):
            return (f"tensors {_shape(counts)}, {_shape(nbrs)}, {_shape(eids)}, where 1-D "
                    f"integer ones were due")
        if counts.numel() != seeds:
            return f"{counts.numel()} counts for {seeds} seeds"
        low, high = _bounds(counts)
        if counts.numel() and (low < 0 or (k >= 0 and high > k)):
            return (f"neighbour counts from {low} to {high}, where each lies in [0, {k}]"
                    if k >= 0 else f"a negative neighbour count ({low})")
        total = int(counts.sum()) if counts.numel() else 0
        if nbrs.numel() != total or eids.numel() != total:
            return (f"{nbrs.numel()} neighbours and {eids.numel()} edge ids, where its "
                    f"counts add up to {total}")
        for name, ids in (("neighbour", nbrs), ("edge", eids)):
            if ids.numel() and int(ids.min()) < 0:  # one pass: no need for the max
                return f"a negative {name} id ({int(ids.min())})"
        if not replace and _repeats_an_edge(counts, eids):
            return "an edge twice for one seed, sampled without replacement"
    return None


def _bounds(t: Tensor) -> tuple[int, int]:
    """``(min, max)`` of a non-empty tensor in one pass (``(0, 0)`` if empty)."""
    if not t.numel():
        return 0, 0
    low, high = torch.aminmax(t)
    return int(low), int(high)


def _repeats_an_edge(counts: Tensor, eids: Tensor) -> bool:
    """Whether some seed's segment of ``eids`` holds an edge id twice."""
    # Costs a sort: 6 ms per 100,000 sampled edges on one thread.
    if eids.numel() < 2 or int(counts.max()) < 2:
        return False
    seed_of = torch.repeat_interleave(torch.arange(counts.numel()), counts.to(torch.long))
    eids = eids.to(torch.long)
    stride = int(eids.max()) + 1
    if stride * counts.numel() < (1 << 62):  # one key per (seed, edge): a flat unique
        return torch.unique(seed_of * stride + eids).numel() != eids.numel()
    return torch.unique(torch.stack([seed_of, eids]), dim=1).shape[1] != eids.numel()


def _fan_out(value: Any) -> int:
    return value if type(value) is int else -1


def sample(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
           reply: list[Tensor]) -> Optional[str]:
    """Per edge type asked for, :func:`_hops`' three tensors (``sizes``
    seeds each; one edge type without ``sizes`` has them all)."""
    sizes = list(args.get("sizes", [_ids_of(tensors)]))
    k = args.get("num_neighbors")
    fan_outs = [_fan_out(v) for v in k] if isinstance(k, list) else [_fan_out(k)] * len(sizes)
    return _hops(sizes, fan_outs, args.get("replace") is True, reply)


def tree(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
         reply: list[Tensor]) -> Optional[str]:
    """Per node type (``result["node_types"]``; ``[nil]`` for a homogeneous
    graph) its nodes, per edge type (the request's; nil joins the nil node
    type to itself) ``row``, ``col`` (int32 indices into its source's and
    its destination's nodes) and ``edge``, then the per-hop counts,
    flattened (empty for an induced subgraph), and, when disjoint, per node
    type its ``batch``; all 1-D int64 but ``row`` and ``col``. The seeds come
    first in their types' nodes, and the per-hop counts add up to the nodes
    and edges of every type, its seeds first."""
    node_types = result.get("node_types")
    if not isinstance(node_types, list) or \
            not all(t is None or isinstance(t, str) for t in node_types):
        return f"node types {describe(node_types)}"
    edge_types = [None if t is None else tuple(t) for t in args["edge_types"]]
    num_types, num_edge_types = len(node_types), len(edge_types)
    disjoint = args.get("disjoint") is True
    problem = _count(num_types * (2 if disjoint else 1) + 3 * num_edge_types + 2, reply)
    if problem is not None:
        return problem
    nodes = dict(zip(node_types, reply[:num_types]))
    per_edge = reply[num_types:num_types + 3 * num_edge_types]
    per_hop_nodes, per_hop_edges = reply[num_types + 3 * num_edge_types:][:2]
    # row and col index into the nodes: int32 halves their bytes.
    dtypes = [torch.int64] * num_types + [torch.int32, torch.int32, torch.int64] * \
        num_edge_types + [torch.int64] * (len(reply) - num_types - 3 * num_edge_types)
    if any(t.dim() != 1 or t.dtype != d for t, d in zip(reply, dtypes)):
        return (f"tensors {[_shape(t) for t in reply][:8]}, where 1-D ones of "
                f"{[str(d) for d in dtypes][:8]} were due")
    seeds = dict(zip(args["seed_types"], args.get("sizes", [_ids_of(tensors)])))
    start = 0
    for node_type, size in seeds.items():
        node = nodes.get(node_type)
        if node is None or node.numel() < size or \
                not torch.equal(node[:size], tensors[0][start:start + size]):
            return f"{describe(node_type)} nodes that do not start with its {size} seeds"
        start += size
    edge_counts = []
    for edge_type, (row, col, edge) in zip(edge_types, zip(*[iter(per_edge)] * 3)):
        src, dst = (None, None) if edge_type is None else (edge_type[0], edge_type[-1])
        if src not in nodes or dst not in nodes:
            return f"no nodes of {describe(src)} or {describe(dst)} for edge type {edge_type}"
        if row.numel() != col.numel() or row.numel() != edge.numel():
            return f"{row.numel()} rows, {col.numel()} columns and {edge.numel()} edge ids"
        for name, index, node_type in (("row", row, src), ("col", col, dst)):
            low, high = _bounds(index)
            if index.numel() and not 0 <= low <= high < nodes[node_type].numel():
                return f"{name} entries of {edge_type} outside its {describe(node_type)} nodes"
        edge_counts.append(row.numel())
    if disjoint and any(b.numel() != nodes[t].numel()
                        for t, b in zip(node_types, reply[-num_types:])):
        return "batch entries that do not match the nodes of their type"
    if args.get("subgraph") == "induced":
        return None if not per_hop_nodes.numel() and not per_hop_edges.numel() else \
            "per-hop counts for an induced subgraph"
    hops = len(args["num_neighbors"][0]) if args["num_neighbors"] else 0
    if per_hop_nodes.numel() != num_types * (hops + 1) or \
            per_hop_edges.numel() != num_edge_types * hops:
        return (f"{per_hop_nodes.numel()} per-hop node and {per_hop_edges.numel()} edge "
                f"counts for {num_types} node and {num_edge_types} edge types over {hops} hops")
    per_type = per_hop_nodes.view(num_types, hops + 1)
    if per_type.sum(1).tolist() != [nodes[t].numel() for t in node_types] or \
            per_hop_edges.view(num_edge_types, hops).sum(1).tolist() != edge_counts or \
            per_type[:, 0].tolist() != [seeds.get(t, 0) for t in node_types]:
        return "per-hop counts that do not add up to the nodes and edges of every type"
    return None


def get(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
        reply: list[Tensor]) -> Optional[str]:
    """Every group's attribute tensors, group after group, each of as many
    rows as the group has ids (``sizes``; one group without ``sizes`` has
    them all); none when the rows were written into the caller's outputs
    (``place``)."""
    if "place" in args:
        if result.get("placed") is not True or reply:
            return (f"{len(reply)} tensors and placed={describe(result.get('placed'))}, "
                    f"where it wrote its rows in place")
        return None
    groups = args["groups"]
    sizes = args.get("sizes", [_ids_of(tensors)])
    problem = _count(sum(len(g["attrs"]) for g in groups), reply)
    start = 0
    for group, size in zip(groups, sizes):
        if problem is not None:
            return problem
        attrs = len(group["attrs"])
        problem = _rows(reply[start:start + attrs], size)
        start += attrs
    return problem


def get_edges(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
              reply: list[Tensor]) -> Optional[str]:
    """One tensor per attribute, a row per edge id."""
    return _count(len(args["attrs"]), reply) or _rows(reply, _ids_of(tensors))


def aligned(count: int) -> ReplyCheck:
    """``count`` 1-D tensors of one length."""
    def check(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
              reply: list[Tensor]) -> Optional[str]:
        problem = _count(count, reply)
        if problem is None and any(t.dim() != 1 or t.numel() != reply[0].numel()
                                   for t in reply):
            problem = f"tensors {[_shape(t) for t in reply]}, where 1-D ones of one length " \
                      f"were due"
        return problem
    return check


def books(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
           reply: list[Tensor]) -> Optional[str]:
    # The partition books, one per node type: ``meta``'s whole answer (its
    # fields, the books against them) is read and checked in one piece by
    # pyg_dist.store.connect, which names what a server of another version
    # lacks.
    return None


def rows_of_ids(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
                reply: list[Tensor]) -> Optional[str]:
    """One 2-D tensor: a row of ``result["dim"]`` values per requested id
    (none when the rows were written into the caller's outputs: ``place``)."""
    if "place" in args:
        if result.get("placed") is not True or reply:
            return (f"{len(reply)} tensors and placed={describe(result.get('placed'))}, "
                    f"where it wrote its rows in place")
        return None
    problem = _count(1, reply) or _rows(reply, _ids_of(tensors))
    if problem is None and (reply[0].dim() != 2 or reply[0].shape[1] != result["dim"]):
        problem = f"a tensor {_shape(reply[0])}, where rows of {describe(result['dim'])} were due"
    return problem
