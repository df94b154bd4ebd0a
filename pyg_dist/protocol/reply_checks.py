"""How the reply of each op relates to its request: tensor counts, dtypes,
lengths that must agree, indices that must point inside what was answered.

:mod:`pyg_dist.protocol.ops` names one of these per op (``OpSpec.reply_check``);
the retry layer runs it on every reply before a caller sees it. Each
returns ``None`` or what is wrong, in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.rpc.op_spec import ReplyCheck
from pyg_dist.rpc.wire_values import describe


def shape_text(t: Tensor) -> str:
    """A tensor's dtype and shape, for a message."""
    return f"{t.dtype} of shape {list(t.shape)}"


def count_problem(expected: int, tensors: list[Tensor]) -> Optional[str]:
    """What is wrong with the number of ``tensors``, if not ``expected``."""
    if len(tensors) != expected:
        return f"{len(tensors)} tensors, where {expected} were due"
    return None


def _rows(tensors: list[Tensor], num_rows: int) -> Optional[str]:
    for t in tensors:
        if t.dim() < 1 or t.shape[0] != num_rows:
            return f"a tensor {shape_text(t)}, where {num_rows} rows were asked for"
    return None


def ids_of(tensors: list[Tensor]) -> int:
    """How many ids a request's first tensor holds (0 without tensors)."""
    return tensors[0].numel() if tensors else 0


def _hops(num_seeds: Sequence[int], fan_outs: Sequence[int], replace: bool,
          reply: list[Tensor]) -> Optional[str]:
    """Per entry, ``counts`` (one per seed, none negative, none over the
    fan-out) then neighbour and edge ids (as many as the counts add up to,
    none negative; without replacement no edge twice for one seed), all 1-D
    integers. A lying peer's values must not reach a batch, nor make its
    reader allocate what it was not asked for."""
    problem = count_problem(3 * len(num_seeds), reply)
    if problem is not None:
        return problem
    for i, (seeds, k) in enumerate(zip(num_seeds, fan_outs)):
        counts, nbrs, eids = reply[3 * i: 3 * i + 3]
        if any(t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool
               for t in (counts, nbrs, eids)):
            return (f"tensors {shape_text(counts)}, {shape_text(nbrs)}, {shape_text(eids)}, "
                    f"where 1-D integer ones were due")
        if counts.numel() != seeds:
            return f"{counts.numel()} counts for {seeds} seeds"
        low, high = bounds(counts)
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


def bounds(t: Tensor) -> tuple[int, int]:
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
    sizes = list(args.get("sizes", [ids_of(tensors)]))
    k = args.get("num_neighbors")
    fan_outs = [_fan_out(v) for v in k] if isinstance(k, list) else [_fan_out(k)] * len(sizes)
    return _hops(sizes, fan_outs, args.get("replace") is True, reply)


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
    sizes = args.get("sizes", [ids_of(tensors)])
    problem = count_problem(sum(len(g["attrs"]) for g in groups), reply)
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
    return count_problem(len(args["attrs"]), reply) or _rows(reply, ids_of(tensors))


def aligned(count: int) -> ReplyCheck:
    """``count`` 1-D tensors of one length."""
    def check(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
              reply: list[Tensor]) -> Optional[str]:
        problem = count_problem(count, reply)
        if problem is None and any(t.dim() != 1 or t.numel() != reply[0].numel()
                                   for t in reply):
            problem = f"tensors {[shape_text(t) for t in reply]}, where 1-D ones of one length " \
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
    problem = count_problem(1, reply) or _rows(reply, ids_of(tensors))
    if problem is None and (reply[0].dim() != 2 or reply[0].shape[1] != result["dim"]):
        problem = (f"a tensor {shape_text(reply[0])}, where rows of {describe(result['dim'])} "
                   f"were due")
    return problem
