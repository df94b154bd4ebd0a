"""Weighted and temporal ``sample``: the attributes it draws by, checked once.

A ``sample`` request may name an edge weight (``weight_attr``) and a time
(``time_attr``, a node or an edge attribute, with one int64 time per seed as
its second tensor). :class:`SampleAttributes` finds those attributes in the
part's files the first time they are asked for, checks them (known name, one
value per edge or node, a numeric weight that is finite and non-negative, an
integer time) and keeps them as one value per CSC entry of the part, so
that the kernels of :mod:`pyg_dist.kernels` gather straight from them
(and, built from them once when first needed, a time's sorted layout and a
weight's alias tables):

* an edge attribute is stored with the edges (``part-K/edges*.safetensors``),
  in the file's CSC order;
* a node time is needed for the *source* of every entry, which another part
  may own (a halo node), so the times of every part's nodes are read once
  into a table over all nodes and gathered by source.

A refused attribute raises :class:`~pyg_dist.errors.StoreError` naming it,
and stays refused (the answer is remembered, not recomputed per request).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import ProtocolError, StoreError
from pyg_dist.kernels import (
    AliasTable,
    build_alias_table,
    sample_time_sorted,
    sample_weighted_segments,
    sort_by_time,
)
from pyg_dist.partitioning import PartitionReader
from pyg_dist.partitioning.file_names import edge_ends
from pyg_dist.partitioning.format import load_tensors, type_from_json
from pyg_dist.rpc.wire_values import describe

_INT_TIME = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@dataclass(frozen=True)
class SampleRequest:
    """The attribute part of one checked ``sample`` request.

    Attributes:
        weight_attr: Edge weight to draw by, or ``None``.
        time_attr: Node or edge time, or ``None``.
        strategy: ``"uniform"`` or ``"last"``.
        seed_time: int64, one per seed, when ``time_attr`` is given.
    """

    weight_attr: Optional[str]
    time_attr: Optional[str]
    strategy: str
    seed_time: Optional[Tensor]


def wants_attributes(args: dict[str, Any]) -> bool:
    """Whether a ``sample`` request names a weight or a time (the uniform
    path skips everything in this module otherwise)."""
    return args.get("weight_attr") is not None or args.get("time_attr") is not None


def parse_request(args: dict[str, Any], tensors: list[Tensor]) -> SampleRequest:
    """The attribute arguments and the seed times of ``sample`` (their types,
    and one int64 time per seed with ``time_attr``, checked by the op's
    declaration, :data:`pyg_dist.protocol.ops.SAMPLE`).

    Raises:
        ProtocolError: on ``temporal_strategy`` ``"last"`` without a time.
    """
    weight_attr, time_attr = args.get("weight_attr"), args.get("time_attr")
    strategy = args.get("temporal_strategy", "uniform")
    if time_attr is None and strategy != "uniform":
        raise ProtocolError("temporal_strategy 'last' needs a time_attr")
    return SampleRequest(weight_attr, time_attr, strategy,
                         tensors[1] if time_attr is not None else None)


class SampleAttributes:
    """Edge weights and times of one part, per CSC entry, loaded on first use.

    Args:
        reader: The dataset.
        part: The part served.
        csc: Edge type -> ``(row, edge_ids, deg)`` of the part's CSC as
            served (global sources, global edge ids, every destination's
            in-degree).
    """

    def __init__(self, reader: PartitionReader, part: int,
                 csc: dict[Any, tuple[Tensor, Tensor, Tensor]]) -> None:
        self.reader = reader
        self.part = part
        self.csc = csc
        self._lock = threading.RLock()  # a sorted layout loads its times inside
        # (kind, edge_type, name) -> Tensor, or the StoreError that refused it.
        self._cache: dict[tuple, Any] = {}
        self._time_kind: dict[tuple, str] = {}

    def weight(self, edge_type: Any, name: str) -> Tensor:
        """Weight of every CSC entry of ``edge_type`` (float32 if stored so,
        else float64).

        Raises:
            StoreError: if the part holds no such edge attribute, or its
                values are not one finite, non-negative number per edge.
        """
        return self._cached(("weight", edge_type, name), lambda: self._load_weight(edge_type,
                                                                                  name))

    def time(self, edge_type: Any, name: str) -> tuple[Tensor, str]:
        """int64 time of every CSC entry (its source node's or its own), and
        ``"node"`` or ``"edge"``: where ``name`` was found (a node attribute
        first, as PyG looks).

        Raises:
            StoreError: if neither the nodes nor the edges hold ``name`` as
                one integer per row.
        """
        key = ("time", edge_type, name)
        value = self._cached(key, lambda: self._load_time(key, edge_type, name))
        return value, self._time_kind[key]

    def _cached(self, key: tuple, load: Any) -> Tensor:
        with self._lock:  # worker threads: load once
            value = self._cache.get(key)
            if value is None:
                try:
                    value = load()
                except StoreError as exc:
                    value = exc
                if len(self._cache) < 64:  # clients choose names: keep it small
                    self._cache[key] = value
        if isinstance(value, StoreError):
            raise StoreError(str(value))
        return value

    # Loading ###############################################################

    def _edge_entry(self, edge_type: Any) -> dict[str, Any]:
        for entry in self.reader.meta["parts"][self.part]["edge_types"]:
            if type_from_json(entry["type"]) == edge_type:
                return entry
        raise StoreError(f"part {self.part} holds no edge type {describe(edge_type)}")

    def _edge_specs(self, edge_type: Any) -> dict[str, dict[str, Any]]:
        for entry in self.reader.meta["edge_types"]:
            if type_from_json(entry["type"]) == edge_type:
                return entry.get("features", {})
        return {}

    def _edge_values(self, edge_type: Any, name: str, what: str) -> Tensor:
        specs = self._edge_specs(edge_type)
        if name not in specs:
            raise StoreError(f"{what} {name!r} is not an edge attribute of this graph; its "
                             f"edges hold {sorted(specs)} (partition the graph with it as "
                             f"an edge-level attribute, named with 'edge', one row per edge)")
        entry = self._edge_entry(edge_type)
        path = self.reader.path(entry["file"])
        loaded = load_tensors(path, [name, "edge_ids"], mmap_=True)
        values, file_ids = loaded[name], loaded["edge_ids"]
        _, served_ids, _ = self.csc[edge_type]
        if values.dim() != 1 and not (values.dim() == 2 and values.shape[1] == 1):
            raise StoreError(f"{what} {name!r} must hold one value per edge, got rows of "
                             f"shape {list(values.shape[1:])}")
        values = values.reshape(-1)
        if not torch.equal(file_ids, served_ids):
            # A store plugin may serve the CSC in another order: follow the ids.
            order = torch.argsort(file_ids)
            where = torch.searchsorted(file_ids[order], served_ids).clamp_(
                max=max(file_ids.numel() - 1, 0))
            if not torch.equal(file_ids[order][where], served_ids):
                raise StoreError(f"part {self.part}'s graph store serves edges its file does "
                                 f"not hold; cannot align {what} {name!r}")
            values = values[order[where]]
        return values

    def _load_weight(self, edge_type: Any, name: str) -> Tensor:
        values = self._edge_values(edge_type, name, "weight_attr")
        if values.dtype == torch.bool or values.is_complex():
            raise StoreError(f"weight_attr {name!r} must be numeric, got {values.dtype}")
        # float32 weights stay float32: the kernels race in float32 then.
        weight = values.float() if values.dtype in (torch.float16, torch.bfloat16,
                                                    torch.float32) else values.double()
        bad = ~torch.isfinite(weight) | (weight < 0)
        if bool(bad.any()):
            first = int(bad.nonzero()[0])
            raise StoreError(f"weight_attr {name!r} holds {int(bad.sum())} negative, NaN or "
                             f"infinite weights on part {self.part} (first: "
                             f"{float(weight[first])}); weights must be finite and >= 0")
        return weight

    def _load_time(self, key: tuple, edge_type: Any, name: str) -> Tensor:
        src = edge_ends(edge_type)[0]
        node_specs = self.reader.node_feature_specs(src)
        if name in node_specs:
            self._time_kind[key] = "node"
            row = self.csc[edge_type][0]
            return self._node_times(src, name).index_select(0, row)
        if name not in self._edge_specs(edge_type):
            raise StoreError(f"time_attr {name!r} is neither a node nor an edge attribute of "
                             f"this graph; nodes hold {sorted(node_specs)}, edges "
                             f"{sorted(self._edge_specs(edge_type))}")
        values = self._edge_values(edge_type, name, "time_attr")
        self._time_kind[key] = "edge"
        return _int_time(values, name)

    def _node_times(self, node_type: Optional[str], name: str) -> Tensor:
        """The time of every node of ``node_type``, read from every part."""
        num = next(t["num_nodes"] for t in self.reader.meta["node_types"]
                   if type_from_json(t["type"]) == node_type)
        table = torch.zeros(num, dtype=torch.int64)
        for part in self.reader.meta["parts"]:
            for entry in part["node_types"]:
                if type_from_json(entry["type"]) != node_type:
                    continue
                loaded = load_tensors(self.reader.path(entry["file"]), ["node_ids", name],
                                      mmap_=True)
                values = loaded[name]
                if values.dim() != 1:
                    raise StoreError(f"time_attr {name!r} must hold one value per node, got "
                                     f"rows of shape {list(values.shape[1:])}")
                table[loaded["node_ids"]] = _int_time(values, name)
        return table

    def time_sorted(self, edge_type: Any, name: str) -> tuple[Tensor, Tensor]:
        """``(perm, sorted_time)``: the part's CSC sorted by ``name`` within
        every destination (:func:`~pyg_dist.kernels.sort_by_time`), once."""
        key = ("sorted", edge_type, name)
        return self._cached(key, lambda: sort_by_time(self.csc[edge_type][2],
                                                      self.time(edge_type, name)[0]))

    def sorted_weight(self, edge_type: Any, weight_attr: str, time_attr: str) -> Tensor:
        """The weights in the layout of :meth:`time_sorted`."""
        key = ("sorted-weight", edge_type, weight_attr, time_attr)
        return self._cached(key, lambda: self.weight(edge_type, weight_attr).index_select(
            0, self.time_sorted(edge_type, time_attr)[0]))

    def alias_table(self, edge_type: Any, name: str) -> AliasTable:
        """Alias tables of the weights ``name`` over the part's CSC columns
        (:func:`~pyg_dist.kernels.build_alias_table`), built by the first
        draw with replacement by them and kept (8 bytes a CSC entry): the
        weights never change, and a draw is then O(1)."""
        key = ("alias", edge_type, name)
        return self._cached(key, lambda: build_alias_table(self.csc[edge_type][2],
                                                           self.weight(edge_type, name)))

    # Sampling ##############################################################

    def sample(self, edge_type: Any, request: SampleRequest, start: Tensor, deg: Tensor,
               k: int, replace: bool, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draws ``(counts, positions)`` by weight and/or from the seeds' past.

        Raises:
            StoreError: on an attribute this part cannot draw by.
            ProtocolError: on a combination the kernels refuse ('last' with
                replacement or weights).
        """
        weight = None if request.weight_attr is None else \
            self.weight(edge_type, request.weight_attr)
        if request.time_attr is None:
            # The seeds' segments are whole columns: the alias tables apply.
            alias = self.alias_table(edge_type, request.weight_attr) if replace and k > 0 \
                else None
            return sample_weighted_segments(start, deg, weight, k, replace, generator,
                                            alias=alias)
        perm, sorted_time = self.time_sorted(edge_type, request.time_attr)
        if weight is not None:
            weight = self.sorted_weight(edge_type, request.weight_attr, request.time_attr)
        try:
            return sample_time_sorted(start, deg, sorted_time, perm, request.seed_time, k,
                                      request.strategy, replace, weight, generator)
        except ValueError as exc:
            raise ProtocolError(f"temporal sampling by {request.time_attr!r}: {exc}") from exc


def _int_time(values: Tensor, name: str) -> Tensor:
    if values.dtype not in _INT_TIME:
        raise StoreError(f"time_attr {name!r} must hold integer times (int64, e.g. seconds "
                         f"or milliseconds), got {values.dtype}")
    return values.to(torch.int64)
