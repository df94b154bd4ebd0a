"""What a ``sample_tree`` or ``sample_tree_types`` request may say, checked.

Every value crosses a socket: bounded lists, ints in range, names of a
bounded length, one seed time per seed. The settings come back hashable
(a coordinator keeps a sampler per setting).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import torch
from torch import Tensor

from pyg_dist.errors import ProtocolError
from pyg_dist.rpc.wire_values import describe
from pyg_dist.server.requests import int_arg

MAX_HOPS = 16
"""Most hops one tree may ask for."""
MAX_TYPES = 4096
"""Most edge types (and seed types) one ``sample_tree_types`` may name."""

_SEED_RANGE = (0, (1 << 63) - 1)
_SUBGRAPHS = ("directional", "induced")


class TreeRequest(NamedTuple):
    """A checked tree request.

    ``settings`` is ``(fan_outs, replace, disjoint, subgraph, weight_attr,
    time_attr, temporal_strategy)``, where ``fan_outs`` is a tuple of ints
    (homogeneous) or of ``(edge_type, fan_outs)`` pairs; ``seeds`` and
    ``seed_time`` are per seed type (``None``: the homogeneous graph's one).
    """

    settings: tuple
    seed: int
    deadline: Optional[float]
    seeds: dict[Optional[str], Tensor]
    seed_time: Optional[dict[Optional[str], Tensor]]


def parse_tree(args: dict[str, Any], tensors: list[Tensor]) -> TreeRequest:
    """A ``sample_tree`` request (a homogeneous graph's).

    Raises:
        ProtocolError: naming what is wrong.
    """
    fanouts = _fan_outs(args.get("num_neighbors"), "num_neighbors")
    return _request(args, tensors, tuple(fanouts), [None], None)


def parse_tree_types(args: dict[str, Any], tensors: list[Tensor]) -> TreeRequest:
    """A ``sample_tree_types`` request: ``edge_types`` (``[src, rel, dst]``
    each) with one fan-out list each in ``num_neighbors`` (as many hops
    each), seeds of the node types ``seed_types``, ``sizes`` of them.

    Raises:
        ProtocolError: naming what is wrong.
    """
    edge_types, lists = args.get("edge_types"), args.get("num_neighbors")
    if not isinstance(edge_types, list) or not 1 <= len(edge_types) <= MAX_TYPES or any(
            not isinstance(t, list) or len(t) != 3 or not all(_is_name(v) for v in t)
            for t in edge_types):
        raise ProtocolError(f"argument 'edge_types' must list 1 to {MAX_TYPES} "
                            f"[src, rel, dst] names, got {describe(edge_types)}")
    if not isinstance(lists, list) or len(lists) != len(edge_types):
        raise ProtocolError(f"argument 'num_neighbors' must hold one fan-out list per edge "
                            f"type ({len(edge_types)}), got {describe(lists)}")
    fanouts = [_fan_outs(k, f"num_neighbors[{i}]") for i, k in enumerate(lists)]
    if len({len(k) for k in fanouts}) != 1:
        raise ProtocolError("every edge type needs the same number of hops in "
                            "'num_neighbors'")
    types, sizes = args.get("seed_types"), args.get("sizes")
    if not isinstance(types, list) or not 1 <= len(types) <= MAX_TYPES or \
            not all(_is_name(t) for t in types) or len(set(types)) != len(types):
        raise ProtocolError(f"argument 'seed_types' must list 1 to {MAX_TYPES} distinct node "
                            f"types, got {describe(types)}")
    if not isinstance(sizes, list) or len(sizes) != len(types) or any(
            not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in sizes):
        raise ProtocolError(f"argument 'sizes' must hold one count >= 0 per seed type, got "
                            f"{describe(sizes)}")
    pairs = tuple((tuple(t), tuple(k)) for t, k in zip(edge_types, fanouts))
    return _request(args, tensors, pairs, types, sizes)


def _request(args: dict[str, Any], tensors: list[Tensor], fanouts: tuple, types: list,
             sizes: Optional[list[int]]) -> TreeRequest:
    seed = int_arg(args, "seed", None, *_SEED_RANGE)
    if seed is None:
        raise ProtocolError("argument 'seed' is required")
    flags = []
    for name in ("replace", "disjoint"):
        value = args.get(name, False)
        if not isinstance(value, bool):
            raise ProtocolError(f"argument {name!r} must be a bool, got {describe(value)}")
        flags.append(value)
    subgraph = args.get("subgraph", "directional")
    if subgraph not in _SUBGRAPHS:
        raise ProtocolError(f"argument 'subgraph' must be one of {list(_SUBGRAPHS)}, got "
                            f"{describe(subgraph)}")
    names = []
    for name in ("weight_attr", "time_attr", "temporal_strategy"):
        value = args.get(name)
        if value is not None and not _is_name(value):
            raise ProtocolError(f"argument {name!r} must be a name, got {describe(value)}")
        names.append(value)
    deadline = args.get("timeout")
    if deadline is not None and (isinstance(deadline, bool)
                                 or not isinstance(deadline, (int, float))
                                 or not math.isfinite(deadline) or not 0 < deadline <= 86400):
        raise ProtocolError(f"argument 'timeout' must be seconds in (0, 86400], got "
                            f"{describe(deadline)}")
    settings = (fanouts, flags[0], flags[1], subgraph, names[0], names[1],
                names[2] or "uniform")
    timed = names[1] is not None
    if len(tensors) != (2 if timed else 1):
        raise ProtocolError(f"a tree request takes the seeds{' and their times' if timed else ''}"
                            f": {2 if timed else 1} tensors, got {len(tensors)}")
    for t in tensors:
        if t.dtype != torch.int64 or t.dim() != 1 or t.numel() != tensors[0].numel():
            raise ProtocolError(f"a tree request's tensors must be 1-D int64 of one length, "
                                f"got {[f'{x.dtype} {list(x.shape)}' for x in tensors]}")
    counts = [tensors[0].numel()] if sizes is None else sizes
    if sum(counts) != tensors[0].numel():
        raise ProtocolError(f"'sizes' add up to {sum(counts)} seeds, the tensor holds "
                            f"{tensors[0].numel()}")
    seeds = dict(zip(types, tensors[0].split(counts)))
    seed_time = dict(zip(types, tensors[1].split(counts))) if timed else None
    return TreeRequest(settings, seed, None if deadline is None else float(deadline), seeds,
                       seed_time)


def _fan_outs(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_HOPS or any(
            not isinstance(k, int) or isinstance(k, bool) or not -1 <= k <= 1 << 31
            for k in value):
        raise ProtocolError(f"argument {name!r} must list 1 to {MAX_HOPS} fan-outs "
                            f"(ints >= -1), got {describe(value)}")
    return value


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 256
