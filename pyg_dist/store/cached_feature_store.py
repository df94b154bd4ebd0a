"""A trainer-side cache of hot feature rows in front of the partition servers.

Feature rows are most of what a batch moves across the network, and real
graphs are skewed: a few nodes appear in most batches. :class:`CachedFeatureStore`
keeps the rows of the nodes a policy plugin chooses (see
:mod:`pyg_dist.store.cache_policy`) in the trainer's memory, answers them
locally and asks the servers only for the rest: still one ``get`` per server
and batch, as the uncached store does. The cache is filled once, at start-up,
and is read-only, so the batches are exactly those of the uncached store.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.typing import FeatureTensorType

from pyg_dist.errors import CacheError, PluginError, StoreError
from pyg_dist.store.cache_policy import CacheContext, checked_choice
from pyg_dist.store.remote_feature_store import (
    RemoteFeatureStore,
    copy_rows,
    outputs_pinned,
)

logger = logging.getLogger(__name__)

# A byte-sized capacity is an int; a fraction of the nodes is a float in (0, 1].
Capacity = Union[int, float]


class CachedFeatureStore(FeatureStore):
    """A read-only PyG ``FeatureStore`` that answers hot rows from memory.

    Wraps the :class:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore`
    of :func:`pyg_dist.connect` and is used in its place, e.g.
    ``DistNeighborLoader((CachedFeatureStore(fs, 0.2, graph_store=gs), gs), ...)``.

    Args:
        feature_store: The remote feature store to put the cache in front of.
        capacity: Bytes of rows to keep (an ``int``), or the fraction of the
            graph's nodes whose rows to keep (a ``float`` in ``(0, 1]``).
        policy: Name of a ``pyg_dist.cache_policies`` plugin (``"degree"``,
            ``"frequency"``, ``"halo"``, or a third party's), or the policy
            callable itself.
        graph_store: The graph store of the same graph (from the same
            :func:`pyg_dist.connect` call); the bundled policies need it.
        attrs: Features cached per node; ``None``: every feature not in
            ``whole_attrs``.
        whole_attrs: Features cached for *every* node, outside ``capacity``
            (labels, masks: a byte or a few per node).
        device: Where the cached rows live: ``None`` (CPU memory) or a CUDA
            device; hits are gathered there.
        pin_memory: Keep CPU rows in page-locked memory (for batches copied
            to a GPU); needs CUDA.
        policy_options: Keyword arguments for the policy (e.g. the
            ``frequency`` policy's ``num_neighbors`` and ``input_nodes``).
        registry: The plugin registry to find ``policy`` in; ``None``: the
            installed plugins.

    Raises:
        CacheError: capacity over the memory available, an unknown policy or
            policy option, a policy answer that is not node ids, stores of
            two different graphs. Nothing is kept half-filled.
    """

    def __init__(self, feature_store: RemoteFeatureStore, capacity: Capacity,
                 policy: Any = "degree", *, graph_store: Any = None,
                 attrs: Optional[Sequence[str]] = None, whole_attrs: Sequence[str] = (),
                 device: Any = None, pin_memory: bool = False,
                 policy_options: Optional[dict[str, Any]] = None,
                 registry: Any = None) -> None:
        super().__init__()
        if not isinstance(feature_store, RemoteFeatureStore):
            raise CacheError(f"CachedFeatureStore wraps the RemoteFeatureStore of "
                             f"pyg_dist.connect(), got {type(feature_store).__name__}")
        _check_same_graph(feature_store, graph_store)
        self.remote = feature_store
        self.num_nodes = feature_store.num_nodes
        self.features = feature_store.features
        self.graph_id = feature_store.graph_id
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._lock = threading.Lock()
        self._stats = {"hits": 0, "misses": 0, "bytes_fetched": 0, "bytes_saved": 0}
        self.group = self._one_group()
        self.whole_attrs = list(whole_attrs)
        self.attrs = self._cached_attrs(attrs)
        self.row_bytes = sum(self._row_bytes(name) for name in self.attrs)
        budget = self._budget(capacity)
        self._check_memory(budget, pin_memory)
        context = CacheContext(feature_store, graph_store, self.num_nodes, self.group)
        name, choose = _resolve_policy(policy, registry)
        start = time.perf_counter()
        try:
            answer = choose(context, budget, **(policy_options or {}))
        except TypeError as exc:
            raise CacheError(f"cache policy {name!r} refused its options "
                             f"{sorted(policy_options or {})}: {exc}") from exc
        ids = checked_choice(answer, budget, self.num_nodes, name)
        self.report: dict[str, Any] = {"policy": name, "cached_nodes": ids.numel(),
                                       "choose_seconds": 0.0, **context.report}
        self.report["choose_seconds"] = round(time.perf_counter() - start, 3)
        start = time.perf_counter()
        self._fill(ids, pin_memory)
        self.report["fill_seconds"] = round(time.perf_counter() - start, 3)
        self.report["cached_bytes"] = ids.numel() * self.row_bytes
        logger.info("feature cache (%s): %d of %d nodes, %.1f MiB, chosen in %.2f s, "
                    "filled in %.2f s", name, ids.numel(), self.num_nodes,
                    self.report["cached_bytes"] / 2**20, self.report["choose_seconds"],
                    self.report["fill_seconds"])

    # Building ##############################################################

    def _one_group(self) -> Optional[str]:
        groups = {group for group, _ in self.features}
        if len(groups) > 1:
            raise CacheError(f"CachedFeatureStore caches one node type for now; the servers "
                             f"hold {sorted(map(str, groups))}")
        return next(iter(groups), None)

    def _cached_attrs(self, attrs: Optional[Sequence[str]]) -> list[str]:
        served = [name for _, name in self.features]
        for name in list(attrs or []) + self.whole_attrs:
            if name not in served:
                raise CacheError(f"no feature {name!r} on the servers to cache; they hold "
                                 f"{served}")
        if attrs is None:
            return [name for name in served if name not in self.whole_attrs]
        return list(attrs)

    def _row_bytes(self, name: str) -> int:
        info = self.features[(self.group, name)]
        return math.prod(info.shape) * info.dtype.itemsize

    def _budget(self, capacity: Capacity) -> int:
        """Nodes the cache holds for ``capacity``."""
        if isinstance(capacity, bool) or not isinstance(capacity, (int, float)):
            raise CacheError(f"capacity must be bytes (an int) or a fraction of the nodes (a "
                             f"float in (0, 1]), got {capacity!r}")
        if isinstance(capacity, float):
            if not 0.0 < capacity <= 1.0:
                raise CacheError(f"a fractional capacity must be in (0, 1], got {capacity}")
            return int(capacity * self.num_nodes)
        if capacity < 0:
            raise CacheError(f"capacity must be >= 0 bytes, got {capacity}")
        return min(self.num_nodes, capacity // max(1, self.row_bytes))

    def _check_memory(self, budget: int, pin_memory: bool) -> None:
        whole = sum(self._row_bytes(name) for name in self.whole_attrs) * self.num_nodes
        needed = budget * self.row_bytes + whole + 8 * self.num_nodes  # + the slot table
        if self.device.type == "cuda":
            available = torch.cuda.mem_get_info(self.device)[0]
        else:
            available = _available_memory()
            if pin_memory and not torch.cuda.is_available():
                raise CacheError("pin_memory=True needs CUDA; leave it False on a CPU-only "
                                 "machine")
        if needed > available:
            raise CacheError(f"the cache needs {needed / 2**20:.1f} MiB ({budget} nodes x "
                             f"{self.row_bytes} bytes, {whole} bytes of whole columns) but "
                             f"{self.device} has {available / 2**20:.1f} MiB available; "
                             f"lower capacity")
        self._pin = pin_memory and self.device.type == "cpu"

    def _fill(self, ids: Tensor, pin_memory: bool) -> None:
        """Fetches the chosen rows (one request per server) and the whole columns."""
        fetched = self.remote.multi_get_tensor(
            [TensorAttr(self.group, name, ids) for name in self.attrs]) if self.attrs else []
        whole = self.remote.multi_get_tensor(
            [TensorAttr(self.group, name, None) for name in self.whole_attrs]) \
            if self.whole_attrs else []
        self._rows = {name: self._place(rows) for name, rows in zip(self.attrs, fetched)}
        self._whole = {name: self._place(rows) for name, rows in zip(self.whole_attrs, whole)}
        slot = torch.full((self.num_nodes,), -1, dtype=torch.long)
        slot[ids] = torch.arange(ids.numel())
        self._slot = slot.to(self.device)

    def _place(self, rows: Tensor) -> Tensor:
        rows = rows.to(self.device)
        return rows.pin_memory() if self._pin else rows

    # PyG FeatureStore interface ############################################

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """Every feature the servers hold (cached or not)."""
        return self.remote.get_all_tensor_attrs()

    def _put_tensor(self, tensor: FeatureTensorType, attr: TensorAttr) -> bool:
        raise StoreError("CachedFeatureStore is read-only: its rows mirror the partition "
                         "servers; partition the changed graph again and build a new cache")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise StoreError("CachedFeatureStore is read-only: its rows mirror the partition "
                         "servers; partition the changed graph again and build a new cache")

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[tuple[int, ...]]:
        return self.remote.get_tensor_size(attr)

    def _get_tensor(self, attr: TensorAttr) -> Optional[FeatureTensorType]:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[Optional[FeatureTensorType]]:
        """Hits from memory; misses and uncached features with one ``get``
        per server and index, as the remote store asks."""
        out: list[Optional[FeatureTensorType]] = [None] * len(attrs)
        plan: dict[tuple[int, Optional[str]], list[int]] = {}
        for i, attr in enumerate(attrs):
            plan.setdefault((id(attr.index), attr.group_name), []).append(i)
        for (_, group), members in plan.items():
            first = attrs[members[0]]
            if group != self.group:
                for i, tensor in zip(members, self.remote.multi_get_tensor(
                        [attrs[i] for i in members])):
                    out[i] = tensor
                continue
            ids, scalar = self.remote.node_ids(first.index)
            names = [attrs[i].attr_name for i in members]
            for i, tensor in zip(members, self._rows_for(ids, group, names)):
                out[i] = tensor[0] if scalar else tensor
        return out

    def _rows_for(self, ids: Tensor, group: Optional[str], names: list[str]) -> list[Tensor]:
        cached = [name for name in names if name in self._rows]
        slot = self._slot[ids.to(self.device)]
        hit = slot >= 0
        hit_pos = hit.nonzero().view(-1)
        miss_pos = (~hit).nonzero().view(-1)
        miss_ids = ids[miss_pos.cpu()]
        # One index object for every name fetched: one request per server.
        remote_names = [name for name in names if name not in self._rows
                        and name not in self._whole]
        ask = [TensorAttr(group, name, miss_ids) for name in cached] + \
              [TensorAttr(group, name, ids) for name in remote_names]
        fetched = dict(zip(cached + remote_names, self.remote.multi_get_tensor(ask))) \
            if ask and (miss_ids.numel() or remote_names) else {}
        hits = hit_pos.numel()
        if cached:
            with self._lock:
                self._stats["hits"] += hits
                self._stats["misses"] += miss_ids.numel()
                self._stats["bytes_saved"] += hits * self.row_bytes
                self._stats["bytes_fetched"] += miss_ids.numel() * self.row_bytes
        out = []
        hit_slots = slot.index_select(0, hit_pos)
        for name in names:
            if name in self._whole:
                out.append(self._whole[name][ids.to(self.device)])
            elif name in self._rows:
                rows = self._rows[name]
                result = torch.empty((ids.numel(), *rows.shape[1:]), dtype=rows.dtype,
                                     device=self.device,
                                     pin_memory=outputs_pinned() and self.device.type == "cpu")
                # Row copies as wide words (copy_rows), not a masked assignment.
                copy_rows(result, hit_pos, rows.index_select(0, hit_slots))
                if miss_ids.numel():
                    copy_rows(result, miss_pos, fetched[name].to(self.device))
                out.append(result)
            else:
                out.append(fetched[name])
        return out

    # Reporting #############################################################

    def cache_stats(self) -> dict[str, Any]:
        """Row lookups answered from the cache (``hits``) and from the servers
        (``misses``), the bytes fetched and saved for cached features, and
        the start-up ``report`` (policy, nodes, bytes, seconds)."""
        with self._lock:
            stats = dict(self._stats)
        lookups = stats["hits"] + stats["misses"]
        stats["hit_rate"] = stats["hits"] / lookups if lookups else 0.0
        stats["report"] = dict(self.report)
        return stats

    def close(self) -> None:
        """Closes the wrapped store (and the connections it shares)."""
        self.remote.close()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(policy={self.report['policy']!r}, "
                f"cached_nodes={self.report['cached_nodes']}, num_nodes={self.num_nodes}, "
                f"device={self.device})")


def _check_same_graph(feature_store: RemoteFeatureStore, graph_store: Any) -> None:
    if graph_store is None:
        return
    ours, theirs = feature_store.graph_id, getattr(graph_store, "graph_id", None)
    if ours is None or theirs is None or ours != theirs:
        raise CacheError(f"the feature store and the graph store serve different graphs "
                         f"({ours} vs {theirs}); pass the pair from one pyg_dist.connect() "
                         f"call")


def _resolve_policy(policy: Any, registry: Any) -> tuple[str, Any]:
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


def _available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
