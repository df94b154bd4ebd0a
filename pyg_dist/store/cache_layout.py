"""What a feature cache keeps of every node type, and how much of it.

:class:`~pyg_dist.store.cached_feature_store.CachedFeatureStore` keeps one
:class:`TypeCache` per node type (the one type ``None`` on a homogeneous
graph). This module decides, before anything is fetched, which features each
type caches per node or whole, and how many nodes of each type a capacity
buys:

* a fraction ``f`` caches ``int(f * N_t)`` nodes of every type ``t``;
* a byte capacity ``B`` is split across types in proportion to the bytes
  of all their cached rows (``N_t * row_bytes_t``): every type gets the
  same fraction ``B / sum_t(N_t * row_bytes_t)`` of its nodes (rounded
  down), so no type is favoured before anything is known of the batches;
* a dict ``{node_type: capacity}`` gives each type its own (an ``int`` or a
  ``float`` as above); a type left out caches no node.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from torch import Tensor

from pyg_dist.errors import CacheError

# A byte-sized capacity is an int; a fraction of the nodes is a float in (0, 1].
Capacity = Union[int, float]
# Feature names for every type that serves them, or {node_type: names}.
AttrSpec = Union[Sequence[str], dict[Optional[str], Sequence[str]]]

STAT_KEYS = ("hits", "misses", "bytes_fetched", "bytes_saved")


@dataclass
class TypeCache:
    """The cache of one node type.

    Args:
        group: The node type (``None`` on a homogeneous graph).
        num_nodes: Nodes of the type.
        attrs: Features cached for the chosen nodes.
        whole_attrs: Features cached for every node of the type.
        row_bytes: Bytes of one node's ``attrs``.
        whole_bytes: Bytes of one node's ``whole_attrs``.
    """

    group: Optional[str]
    num_nodes: int
    attrs: list[str]
    whole_attrs: list[str]
    row_bytes: int
    whole_bytes: int
    budget: int = 0
    rows: dict[str, Tensor] = field(default_factory=dict)
    whole: dict[str, Tensor] = field(default_factory=dict)
    slot: Optional[Tensor] = None
    report: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAT_KEYS, 0))


def type_caches(features: dict[tuple[Optional[str], str], Any],
                num_nodes: dict[Optional[str], int], attrs: Optional[AttrSpec],
                whole_attrs: AttrSpec) -> dict[Optional[str], TypeCache]:
    """One :class:`TypeCache` per node type, its features resolved.

    Args:
        features: ``{(node_type, name): FeatureInfo}`` the servers hold.
        num_nodes: Nodes per node type (every type of the graph).
        attrs: Features cached per chosen node: names (each cached for every
            type that serves it), ``{node_type: names}``, or ``None`` (every
            feature of a type not in its ``whole_attrs``).
        whole_attrs: Features cached for every node, in the same forms.

    Raises:
        CacheError: a name no type serves, a node type the graph does not
            have, or a name its type does not serve.
    """
    served = {t: [name for group, name in features if group == t] for t in num_nodes}
    whole = _per_type(whole_attrs, served, "whole_attrs")
    per_node = _per_type(attrs, served, "attrs") if attrs is not None else \
        {t: [name for name in names if name not in whole[t]] for t, names in served.items()}

    def row_bytes(t: Optional[str], names: list[str]) -> int:
        return sum(math.prod(features[(t, n)].shape) * features[(t, n)].dtype.itemsize
                   for n in names)

    return {t: TypeCache(t, n, per_node[t], whole[t], row_bytes(t, per_node[t]),
                         row_bytes(t, whole[t])) for t, n in num_nodes.items()}


def _per_type(spec: AttrSpec, served: dict[Optional[str], list[str]], what: str
              ) -> dict[Optional[str], list[str]]:
    if isinstance(spec, dict):
        unknown = [t for t in spec if t not in served]
        if unknown:
            raise CacheError(f"{what} names node types the graph does not have: "
                             f"{[str(t) for t in unknown]}; it has "
                             f"{[str(t) for t in served]}")
        per = {t: _names(spec.get(t, ()), what) for t in served}
        for t, names in per.items():
            for name in names:
                if name not in served[t]:
                    raise CacheError(f"no feature {name!r} of node type {t!r} on the servers "
                                     f"to cache; they hold {served[t]} for it")
        return per
    names = _names(spec, what)
    for name in names:
        if not any(name in held for held in served.values()):
            held = served[None] if list(served) == [None] else \
                {str(t): held for t, held in served.items()}
            raise CacheError(f"no feature {name!r} on the servers to cache; they hold {held}")
    return {t: [name for name in names if name in held] for t, held in served.items()}


def _names(spec: Any, what: str) -> list[str]:
    if isinstance(spec, str):
        return [spec]
    try:
        names = list(spec)
    except TypeError:
        raise CacheError(f"{what} must be feature names or {{node_type: names}}, got "
                         f"{type(spec).__name__}") from None
    if not all(isinstance(name, str) for name in names):
        raise CacheError(f"{what} must be feature names (str)")
    return names


def budgets(capacity: Any, types: dict[Optional[str], TypeCache]) -> dict[Optional[str], int]:
    """Nodes of each type that ``capacity`` buys (see the module docstring).

    Raises:
        CacheError: a capacity that is not bytes, a fraction in ``(0, 1]`` or
            (heterogeneous) a dict of those over node types of the graph.
    """
    if isinstance(capacity, dict):
        unknown = [t for t in capacity if t not in types]
        if unknown:
            raise CacheError(f"capacity names node types the graph does not have: "
                             f"{[str(t) for t in unknown]}; it has {[str(t) for t in types]}")
        return {t: budgets(capacity[t], {t: tc})[t] if t in capacity else 0
                for t, tc in types.items()}
    _check_capacity(capacity)
    if isinstance(capacity, float):
        return {t: int(capacity * tc.num_nodes) for t, tc in types.items()}
    total = sum(tc.num_nodes * tc.row_bytes for tc in types.values())
    return {t: min(tc.num_nodes, (capacity * tc.num_nodes * tc.row_bytes // total if total
                                  else capacity) // max(1, tc.row_bytes))
            for t, tc in types.items()}


def _check_capacity(capacity: Any) -> None:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, float)):
        raise CacheError(f"capacity must be bytes (an int) or a fraction of the nodes (a "
                         f"float in (0, 1]), got {capacity!r}")
    if isinstance(capacity, float) and not 0.0 < capacity <= 1.0:
        raise CacheError(f"a fractional capacity must be in (0, 1], got {capacity}")
    if isinstance(capacity, int) and capacity < 0:
        raise CacheError(f"capacity must be >= 0 bytes, got {capacity}")


def available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping (the cache's
    host memory check)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
