"""A trainer-side cache of hot feature rows in front of the partition servers.

Feature rows are most of what a batch moves across the network, and real
graphs are skewed: a few nodes appear in most batches. :class:`CachedFeatureStore`
keeps the rows of the nodes a policy plugin chooses (see
:mod:`pyg_dist.store.cache_policy`) in the trainer's memory, answers them
locally and asks the servers only for the rest: still one ``get`` per server
and batch, as the uncached store does. The cache is filled once, at start-up,
and is read-only, so the batches are exactly those of the uncached store.

On a heterogeneous graph every node type has its own cache (its features,
its slot table, its share of the capacity: :mod:`pyg_dist.store.cache_layout`),
filled by one policy call per type; a batch's misses of every type still go
in one round trip.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.typing import FeatureTensorType

from pyg_dist.errors import CacheError, PygDistError, StoreError
from pyg_dist.store import cache_layout
from pyg_dist.store.cache_layout import (
    STAT_KEYS,
    AttrSpec,
    Capacity,
    TypeCache,
    budgets,
    type_caches,
)
from pyg_dist.store.cache_policy import CacheContext, checked_choice, resolve_policy
from pyg_dist.store.remote_feature_store import (
    RemoteFeatureStore,
    copy_rows,
    outputs_pinned,
)

logger = logging.getLogger(__name__)

__all__ = ["Capacity", "CachedFeatureStore"]


class CachedFeatureStore(FeatureStore):
    """A read-only PyG ``FeatureStore`` that answers hot rows from memory.

    Wraps the :class:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore`
    of :func:`pyg_dist.connect` and is used in its place, e.g.
    ``DistNeighborLoader((CachedFeatureStore(fs, 0.2, graph_store=gs), gs), ...)``.
    On a heterogeneous graph every node type is cached (see
    :mod:`pyg_dist.store.cache_layout` for how a capacity is shared out), and
    ``attrs``, ``whole_attrs`` and ``row_bytes`` are dicts by node type.

    Args:
        feature_store: The remote feature store to put the cache in front of.
        capacity: Bytes of rows to keep (an ``int``; split across node types
            in proportion to the bytes of their rows), or the fraction of
            every node type's nodes whose rows to keep (a ``float`` in
            ``(0, 1]``), or ``{node_type: int or float}`` (types left out
            cache no node).
        policy: Name of a ``pyg_dist.cache_policies`` plugin (``"degree"``,
            ``"frequency"``, ``"halo"``, or a third party's), or the policy
            callable itself; called once per node type.
        graph_store: The graph store of the same graph (from the same
            :func:`pyg_dist.connect` call); the bundled policies need it.
        attrs: Features cached per node; ``None``: every feature not in
            ``whole_attrs``. Names are cached for every node type serving
            them; ``{node_type: names}`` chooses per type.
        whole_attrs: Features cached for *every* node, outside ``capacity``
            (labels, masks: a byte or a few per node), in the forms of
            ``attrs``.
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
            two different graphs, a node type or feature the graph does not
            have. Nothing is kept half-filled.
    """

    def __init__(self, feature_store: RemoteFeatureStore, capacity: Capacity,
                 policy: Any = "degree", *, graph_store: Any = None,
                 attrs: Optional[AttrSpec] = None, whole_attrs: AttrSpec = (),
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
        self.is_hetero = feature_store.router.is_hetero
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._lock = threading.Lock()
        router = feature_store.router
        self._types = type_caches(self.features, {t: router.num_nodes_of(t)
                                                  for t in router.books}, attrs, whole_attrs)
        self.node_types = list(self._types)
        self.group = None if self.is_hetero else self.node_types[0]
        for t, budget in budgets(capacity, self._types).items():
            self._types[t].budget = budget
        self._check_memory(pin_memory)
        name, choose = resolve_policy(policy, registry)
        start = time.perf_counter()
        chosen = self._choose(name, choose, graph_store, policy_options or {})
        choose_seconds = round(time.perf_counter() - start, 3)
        start = time.perf_counter()
        self._fill(chosen)
        self.report = self._build_report(name, chosen, choose_seconds,
                                         round(time.perf_counter() - start, 3))
        logger.info("feature cache (%s): %d of %d nodes, %.1f MiB, chosen in %.2f s, "
                    "filled in %.2f s", name, self.report["cached_nodes"], self.num_nodes,
                    self.report["cached_bytes"] / 2**20, self.report["choose_seconds"],
                    self.report["fill_seconds"])

    # What each node type caches: one value (homogeneous) or a dict by type.

    def _by_type(self, value: Any) -> Any:
        if not self.is_hetero:
            return value(self._types[self.group])
        return {t: value(tc) for t, tc in self._types.items()}

    @property
    def attrs(self) -> Any:
        """Features cached per chosen node (a dict by node type when hetero)."""
        return self._by_type(lambda tc: tc.attrs)

    @property
    def whole_attrs(self) -> Any:
        """Features cached for every node (a dict by node type when hetero)."""
        return self._by_type(lambda tc: tc.whole_attrs)

    @property
    def row_bytes(self) -> Any:
        """Bytes of one chosen node's cached row (a dict by node type when hetero)."""
        return self._by_type(lambda tc: tc.row_bytes)

    # Building ##############################################################

    def _check_memory(self, pin_memory: bool) -> None:
        types = self._types.values()
        whole = sum(tc.whole_bytes * tc.num_nodes for tc in types)
        rows = sum(tc.budget * tc.row_bytes for tc in types)
        needed = rows + whole + 8 * sum(tc.num_nodes for tc in types)  # + the slot tables
        if self.device.type == "cuda":
            available = torch.cuda.mem_get_info(self.device)[0]
        else:
            available = cache_layout.available_memory()
            if pin_memory and not torch.cuda.is_available():
                raise CacheError("pin_memory=True needs CUDA; leave it False on a CPU-only "
                                 "machine")
        if needed > available:
            shares = ", ".join(f"{'' if tc.group is None else f'{tc.group}: '}{tc.budget} "
                               f"nodes x {tc.row_bytes} bytes" for tc in types)
            raise CacheError(f"the cache needs {needed / 2**20:.1f} MiB ({shares}, {whole} "
                             f"bytes of whole columns) but {self.device} has "
                             f"{available / 2**20:.1f} MiB available; lower capacity")
        self._pin = pin_memory and self.device.type == "cpu"

    def _choose(self, name: str, choose: Any, graph_store: Any, options: dict[str, Any]
                ) -> dict[Optional[str], Tensor]:
        """The policy's checked answer for every node type."""
        shared: dict[str, Any] = {}
        chosen = {}
        for t, tc in self._types.items():
            context = CacheContext(self.remote, graph_store, tc.num_nodes, t, shared=shared)
            try:
                answer = choose(context, tc.budget, **options)
            except TypeError as exc:
                if isinstance(exc, PygDistError):  # e.g. GraphKindMismatchError
                    raise
                raise CacheError(f"cache policy {name!r} refused its options "
                                 f"{sorted(options)}: {exc}") from exc
            chosen[t] = checked_choice(answer, tc.budget, tc.num_nodes, name, t)
            tc.report = context.report
        return chosen

    def _fill(self, chosen: dict[Optional[str], Tensor]) -> None:
        """Fetches the chosen rows and the whole columns of every type (one
        round trip, one request per server and type)."""
        asks, into = [], []
        for t, tc in self._types.items():
            for name in tc.attrs:
                asks.append(TensorAttr(t, name, chosen[t]))
                into.append(tc.rows)
            for name in tc.whole_attrs:
                asks.append(TensorAttr(t, name, None))
                into.append(tc.whole)
        fetched = self.remote.multi_get_tensor(asks) if asks else []
        for attr, where, rows in zip(asks, into, fetched):
            where[attr.attr_name] = self._place(rows)
        for t, tc in self._types.items():
            slot = torch.full((tc.num_nodes,), -1, dtype=torch.long)
            slot[chosen[t]] = torch.arange(chosen[t].numel())
            tc.slot = slot.to(self.device)

    def _place(self, rows: Tensor) -> Tensor:
        rows = rows.to(self.device)
        return rows.pin_memory() if self._pin else rows

    def _build_report(self, name: str, chosen: dict[Optional[str], Tensor],
                      choose_seconds: float, fill_seconds: float) -> dict[str, Any]:
        cached = {t: ids.numel() for t, ids in chosen.items()}
        report: dict[str, Any] = {"policy": name, "cached_nodes": sum(cached.values()),
                                  "choose_seconds": choose_seconds}
        if not self.is_hetero:
            report.update(self._types[self.group].report)
        report["fill_seconds"] = fill_seconds
        report["cached_bytes"] = sum(cached[t] * tc.row_bytes for t, tc in self._types.items())
        if self.is_hetero:
            report["types"] = {t: {"budget": tc.budget, "cached_nodes": cached[t],
                                   "cached_bytes": cached[t] * tc.row_bytes, **tc.report}
                               for t, tc in self._types.items()}
        return report

    # PyG FeatureStore interface ############################################

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """Every feature the servers hold (cached or not)."""
        return self.remote.get_all_tensor_attrs()

    def get_all_edge_tensor_attrs(self) -> list[TensorAttr]:
        """Every edge attribute the servers hold (never cached: asked for
        with the batch's misses, in the same round trip)."""
        return self.remote.get_all_edge_tensor_attrs()

    def _put_tensor(self, *_: Any) -> bool:  # and _remove_tensor: the same refusal
        raise StoreError("CachedFeatureStore is read-only: its rows mirror the partition "
                         "servers; partition the changed graph again and build a new cache")

    _remove_tensor = _put_tensor

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[tuple[int, ...]]:
        return self.remote.get_tensor_size(attr)

    def _get_tensor(self, attr: TensorAttr) -> Optional[FeatureTensorType]:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[Optional[FeatureTensorType]]:
        """Hits from memory; the misses and uncached features of every index
        and node type in one remote ``multi_get_tensor`` (one round trip, one
        ``get`` per server, index and type, as the remote store asks)."""
        plan: dict[tuple[int, Optional[str]], list[int]] = {}
        for i, attr in enumerate(attrs):
            plan.setdefault((id(attr.index), attr.group_name), []).append(i)
        lookups: list[tuple[list[int], Optional[_Lookup]]] = []
        ask: list[TensorAttr] = []
        for (_, group), members in plan.items():
            tc = self._types.get(group)
            if tc is None:  # not a node type of ours: the remote store says why
                lookups.append((members, None))
                ask += [attrs[i] for i in members]
                continue
            ids, scalar = self.remote.node_ids(attrs[members[0]].index, group)
            lookup = self._lookup(tc, ids, scalar, [attrs[i].attr_name for i in members])
            lookup.first = len(ask)
            ask += lookup.ask
            lookups.append((members, lookup))
        fetched = self.remote.multi_get_tensor(ask) if ask else []
        out: list[Optional[FeatureTensorType]] = [None] * len(attrs)
        position = 0
        for members, lookup in lookups:
            if lookup is None:
                tensors = fetched[position:position + len(members)]
            else:
                tensors = self._assemble(lookup, fetched[lookup.first:
                                                         lookup.first + len(lookup.ask)])
            position += len(members) if lookup is None else len(lookup.ask)
            for i, tensor in zip(members, tensors):
                out[i] = tensor
        return out

    def _lookup(self, tc: TypeCache, ids: Tensor, scalar: bool, names: list[str]) -> _Lookup:
        """Splits ``ids`` of one type into hits and misses and counts them."""
        slot = tc.slot[ids.to(self.device)]
        hit = slot >= 0
        hit_pos = hit.nonzero().view(-1)
        miss_pos = (~hit).nonzero().view(-1)
        miss_ids = ids[miss_pos.cpu()]
        cached = [name for name in names if name in tc.rows]
        remote_names = [name for name in names if name not in tc.rows
                        and name not in tc.whole]
        # One index object for every name fetched: one request per server.
        ask = [TensorAttr(tc.group, name, miss_ids) for name in cached] \
            if miss_ids.numel() else []
        ask += [TensorAttr(tc.group, name, ids) for name in remote_names]
        if cached:
            hits, misses = hit_pos.numel(), miss_ids.numel()
            with self._lock:
                tc.stats["hits"] += hits
                tc.stats["misses"] += misses
                tc.stats["bytes_saved"] += hits * tc.row_bytes
                tc.stats["bytes_fetched"] += misses * tc.row_bytes
        # Mostly hits: gather every id's slot at once (a miss reads row 0,
        # overwritten by its fetched row), one pass instead of a gather and
        # a scatter of the hits.
        gather_all = slot.clamp(min=0) if 2 * hit_pos.numel() >= ids.numel() else None
        return _Lookup(tc, ids, scalar, names, slot.index_select(0, hit_pos), hit_pos,
                       miss_pos, bool(miss_ids.numel()), ask, gather_all)

    def _assemble(self, lookup: _Lookup, fetched: list[Tensor]) -> list[Tensor]:
        """The rows of every name of a lookup, hits and fetched misses merged."""
        tc = lookup.cache
        by_name = dict(zip((attr.attr_name for attr in lookup.ask), fetched))
        out = []
        for name in lookup.names:
            if name in tc.whole:
                tensor = tc.whole[name][lookup.ids.to(self.device)]
            elif name in tc.rows:
                rows = tc.rows[name]
                tensor = torch.empty((lookup.ids.numel(), *rows.shape[1:]), dtype=rows.dtype,
                                     device=self.device,
                                     pin_memory=outputs_pinned() and self.device.type == "cpu")
                if lookup.gather_all is not None and rows.size(0):
                    # One gather straight into the output (a whole table
                    # cached costs one copy per row, not two).
                    torch.index_select(rows, 0, lookup.gather_all, out=tensor)
                else:
                    # Row copies as wide words (copy_rows), not a masked assignment.
                    copy_rows(tensor, lookup.hit_pos, rows.index_select(0, lookup.hit_slots))
                if lookup.any_miss:
                    copy_rows(tensor, lookup.miss_pos, by_name[name].to(self.device))
            else:
                tensor = by_name[name]
            out.append(tensor[0] if lookup.scalar else tensor)
        return out

    # Reporting #############################################################

    def cache_stats(self) -> dict[str, Any]:
        """Row lookups answered from the cache (``hits``) and from the servers
        (``misses``), the bytes fetched and saved for cached features, and
        the start-up ``report`` (policy, nodes, bytes, seconds); on a
        heterogeneous graph these are totals, and ``types`` has the same
        counts per node type."""
        with self._lock:
            per_type = {t: dict(tc.stats) for t, tc in self._types.items()}
        stats = _with_hit_rate({key: sum(s[key] for s in per_type.values())
                                for key in STAT_KEYS})
        stats["report"] = dict(self.report)
        if self.is_hetero:
            stats["types"] = {t: _with_hit_rate(s) for t, s in per_type.items()}
        return stats

    def close(self) -> None:
        """Closes the wrapped store (and the connections it shares)."""
        self.remote.close()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(policy={self.report['policy']!r}, "
                f"cached_nodes={self.report['cached_nodes']}, num_nodes={self.num_nodes}, "
                f"device={self.device})")


@dataclass
class _Lookup:
    """One index of one node type, split into hits and misses."""

    cache: TypeCache
    ids: Tensor
    scalar: bool
    names: list[str]
    hit_slots: Tensor
    hit_pos: Tensor
    miss_pos: Tensor
    any_miss: bool
    ask: list[TensorAttr]
    gather_all: Optional[Tensor] = None  # every id's slot (misses: 0), when mostly hits
    first: int = 0


def _with_hit_rate(stats: dict[str, Any]) -> dict[str, Any]:
    lookups = stats["hits"] + stats["misses"]
    stats["hit_rate"] = stats["hits"] / lookups if lookups else 0.0
    return stats


def _check_same_graph(feature_store: RemoteFeatureStore, graph_store: Any) -> None:
    if graph_store is None:
        return
    ours, theirs = feature_store.graph_id, getattr(graph_store, "graph_id", None)
    if ours is None or theirs is None or ours != theirs:
        raise CacheError(f"the feature store and the graph store serve different graphs "
                         f"({ours} vs {theirs}); pass the pair from one pyg_dist.connect() "
                         f"call")
