"""Which nodes a trainer-side feature cache keeps: the policy plugin contract.

A cache policy is a plugin of the entry-point group
``pyg_dist.cache_policies`` (see :mod:`pyg_dist.plugins`): a callable

.. code-block:: python

    def my_policy(context: CacheContext, budget: int, **options) -> Tensor: ...

that returns the global ids of at most ``budget`` nodes, most valuable first.
:class:`~pyg_dist.store.cached_feature_store.CachedFeatureStore` calls it at
start-up and keeps the rows of the ids it returns (static, read-only): once
on a homogeneous graph, and once per node type on a heterogeneous one, with
``context.group`` the type, ``context.num_nodes`` its node count, ``budget``
its share of the capacity, and ids numbered within the type. Work done once
for every type (a sampling pass) goes in ``context.shared``, one dict for all
the calls of one cache build.
``options`` are the ``policy_options`` the user passed; a policy refuses the
ones it does not know with a ``TypeError`` (Python does that for a plain
function) that the cache turns into a :class:`~pyg_dist.errors.CacheError`.

The bundled policies (``plugins/pyg_dist_plugins/cache_policies``):
``degree`` (out-degree, which predicts how often sampling reaches a node,
counted from the servers' edges), ``frequency`` (visit counts of a sampling
pass over the training seeds) and ``halo`` (nodes adjacent to the part
served on the trainer's host).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import CacheError, PluginError


@dataclass
class CacheContext:
    """What a policy may look at to choose the cached nodes.

    Args:
        feature_store: The uncached remote feature store.
        graph_store: The remote graph store of the same graph, or ``None``
            when the user gave none (policies that need one refuse).
        num_nodes: Nodes of the graph (of ``group``).
        group: The node type (``None`` for a homogeneous graph).
        report: Where a policy records what it cost (seconds, batches, ...);
            shown by :meth:`CachedFeatureStore.cache_stats` (per node type
            on a heterogeneous graph).
        shared: One dict shared by the calls for every node type of one
            cache build, for work that serves them all (the ``frequency``
            policy keeps its visit counts of every type there).
    """

    feature_store: Any
    graph_store: Any
    num_nodes: int
    group: Optional[str] = None
    report: dict[str, Any] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)

    def require_graph_store(self, policy: str) -> Any:
        """The graph store, or a :class:`CacheError` saying ``policy`` needs one."""
        if self.graph_store is None:
            raise CacheError(f"cache policy {policy!r} needs the graph store: pass "
                             f"CachedFeatureStore(fs, ..., graph_store=gs) with the pair "
                             f"from pyg_dist.connect()")
        return self.graph_store


def checked_choice(ids: Any, budget: int, num_nodes: int, policy: str,
                   node_type: Optional[str] = None) -> Tensor:
    """The first ``budget`` distinct ids of a policy's answer, validated.

    A policy is third-party code: its answer must be 1-D integer ids in
    ``[0, num_nodes)``; repeats keep their first (most valuable) place.

    Args:
        ids: The policy's answer.
        budget: Nodes the cache holds (of this type).
        num_nodes: Nodes of the type; ids must lie below.
        policy: The policy's name, for messages.
        node_type: The node type chosen for (``None``: homogeneous graph).

    Raises:
        CacheError: naming the policy, the node type and what was wrong.
    """
    who = f"cache policy {policy!r}" + ("" if node_type is None else
                                         f" (for node type {node_type!r})")
    if not isinstance(ids, Tensor):
        raise CacheError(f"{who} returned {type(ids).__name__}, "
                         f"expected a 1-D int64 tensor of node ids")
    if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
        raise CacheError(f"{who} returned a tensor of dtype {ids.dtype} and "
                         f"shape {tuple(ids.shape)}, expected 1-D integer node ids")
    ids = ids.to(torch.long).cpu()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise CacheError(f"{who} returned node ids outside "
                         f"[0, {num_nodes}): min {int(ids.min())}, max {int(ids.max())}")
    # Keep the first occurrence of every id, in the policy's order.
    first = torch.full((num_nodes,), ids.numel(), dtype=torch.long)
    first.scatter_reduce_(0, ids, torch.arange(ids.numel()), reduce="amin")
    keep = first[ids] == torch.arange(ids.numel())
    return ids[keep][:max(0, int(budget))]


def top_by_score(score: Tensor, budget: int) -> Tensor:
    """Ids of the ``budget`` highest scores (ties: lower id first), positive
    scores only: a node never seen or without edges is not worth a row."""
    order = torch.sort(score, descending=True, stable=True).indices
    return order[score[order] > 0][:budget]


def resolve_policy(policy: Any, registry: Any) -> tuple[str, Any]:
    """``(name, choose)`` of a policy given as a callable or by the name of
    a ``pyg_dist.cache_policies`` plugin (looked up in ``registry``, the
    default one when ``None``).

    Raises:
        CacheError: if it is neither, or no such plugin is registered.
    """
    if callable(policy):
        return getattr(policy, "__name__", type(policy).__name__), policy
    if not isinstance(policy, str):
        raise CacheError(f"policy must be a plugin name or a callable, got "
                         f"{type(policy).__name__}")
    if registry is None:
        from pyg_dist.plugins import default_registry as registry
    try:
        return policy, registry.cache_policy(policy)
    except PluginError as exc:
        raise CacheError(f"no cache policy {policy!r}: {exc}") from exc
