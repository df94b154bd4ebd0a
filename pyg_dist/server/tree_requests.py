"""What a ``sample_tree`` request may say, checked.

Every value crosses a socket: bounded lists, ints in range, names of a
bounded length, one seed time per seed. The settings come back hashable
(a coordinator keeps a sampler per setting). A homogeneous graph's batch
names its one edge type and its one seed type nil.
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
"""Most edge types (and seed types) one ``sample_tree`` may name."""

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

    @property
    def homogeneous(self) -> bool:
        """Whether the batch is a homogeneous graph's (edge type nil)."""
        fanouts = self.settings[0]
        return not fanouts or not isinstance(fanouts[0], tuple)


def parse_tree(args: dict[str, Any], tensors: list[Tensor]) -> TreeRequest:
    """A ``sample_tree`` request: ``edge_types`` (``[src, rel, dst]`` each,
    or ``[nil]`` for a homogeneous graph) with one fan-out list each in
    ``num_neighbors`` (as many hops each), seeds of the node types
    ``seed_types`` (``[nil]`` likewise), ``sizes`` of them (one seed type
    may leave it out).

    Raises:
        ProtocolError: naming what is wrong.
    """
    edge_types, lists = args.get("edge_types"), args.get("num_neighbors")
    types, sizes = args.get("seed_types"), args.get("sizes")
    homogeneous = edge_types == [None]
    if not homogeneous and (
            not isinstance(edge_types, list) or not 1 <= len(edge_types) <= MAX_TYPES or any(
                not isinstance(t, list) or len(t) != 3 or not all(_is_name(v) for v in t)
                for t in edge_types)):
        raise ProtocolError(f"argument 'edge_types' must list 1 to {MAX_TYPES} "
                            f"[src, rel, dst] names, or be [nil] (a homogeneous graph), got "
                            f"{describe(edge_types)}")
    if not isinstance(lists, list) or len(lists) != len(edge_types):
        raise ProtocolError(f"argument 'num_neighbors' must hold one fan-out list per edge "
                            f"type ({len(edge_types)}), got {describe(lists)}")
    fanouts = [_fan_outs(k, f"num_neighbors[{i}]") for i, k in enumerate(lists)]
    if len({len(k) for k in fanouts}) != 1:
        raise ProtocolError("every edge type needs the same number of hops in "
                            "'num_neighbors'")
    if homogeneous:
        if types != [None]:
            raise ProtocolError(f"argument 'seed_types' must be [nil] for a homogeneous "
                                f"graph's edge type, got {describe(types)}")
    elif not isinstance(types, list) or not 1 <= len(types) <= MAX_TYPES or \
            not all(_is_name(t) for t in types) or len(set(types)) != len(types):
        raise ProtocolError(f"argument 'seed_types' must list 1 to {MAX_TYPES} distinct node "
                            f"types, got {describe(types)}")
    if sizes is None and len(types) == 1:
        sizes = [tensors[0].numel() if tensors else 0]  # the one seed type has every seed
    if not isinstance(sizes, list) or len(sizes) != len(types) or any(
            not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in sizes):
        raise ProtocolError(f"argument 'sizes' must hold one count >= 0 per seed type, got "
                            f"{describe(sizes)}")
    pairs = tuple(fanouts[0]) if homogeneous else \
        tuple((tuple(t), tuple(k)) for t, k in zip(edge_types, fanouts))
    return _request(args, tensors, pairs, types, sizes)


def _request(args: dict[str, Any], tensors: list[Tensor], fanouts: tuple, types: list,
             sizes: list[int]) -> TreeRequest:
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
    if sum(sizes) != tensors[0].numel():
        raise ProtocolError(f"'sizes' add up to {sum(sizes)} seeds, the tensor holds "
                            f"{tensors[0].numel()}")
    seeds = dict(zip(types, tensors[0].split(sizes)))
    seed_time = dict(zip(types, tensors[1].split(sizes))) if timed else None
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
