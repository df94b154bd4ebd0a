"""What a partition server request may say, checked against the part: its id
lookups (global id -> local row, per node type), its CSC per edge type, the
pages, attributes and per-entry sizes a request names. The arguments' types
were checked before the handler ran (:mod:`pyg_dist.protocol.schema`).

Every check raises :class:`~pyg_dist.errors.ProtocolError` (malformed) or
:class:`~pyg_dist.errors.StoreError` (ids this part does not hold); no wire
value is ever ``repr``-ed whole (:func:`~pyg_dist.rpc.wire_values.describe`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import ProtocolError, StoreError
from pyg_dist.rpc.wire_format import DTYPES
from pyg_dist.rpc.wire_values import describe
from pyg_dist.store.local import local_rows

# Global -> local lookups use a dense table (4 bytes per node of the whole
# graph) up to this many nodes: one gather instead of a binary search per id,
# which dominates small requests. Bigger graphs fall back to searchsorted.
TABLE_MAX_NODES = 1 << 26


class LocalIndex:
    """Maps owned global ids of one node type to local rows, refusing others.

    Args:
        node_ids: The owned global ids, sorted (int64).
        num_nodes: Global ids lie in ``[0, num_nodes)``.
        part: The part (named in errors).
        values: What :meth:`rows` answers for ``node_ids[i]``: ``values[i]``
            (default: ``i``, the local row). The edge lookups give the
            position of an edge in its part's file.
        what: What the ids are (``"node"``, ``"edge"``), for messages.
        table_max: Largest ``num_nodes`` given a dense table (4 bytes per id
            of the whole graph); above it, a binary search per id. Default:
            :data:`TABLE_MAX_NODES`.
    """

    def __init__(self, node_ids: Tensor, num_nodes: int, part: int,
                 values: Optional[Tensor] = None, what: str = "node",
                 table_max: Optional[int] = None) -> None:
        self.node_ids = node_ids
        self.num_nodes = num_nodes  # of this node type: global ids lie in [0, num_nodes)
        self.part = part
        self.values = values
        self.what = what
        self.table: Optional[Tensor] = None
        if table_max is None:
            table_max = TABLE_MAX_NODES  # read here: tests lower it
        if num_nodes <= table_max and node_ids.numel() < (1 << 31):
            self.table = torch.full((num_nodes,), -1, dtype=torch.int32)
            self.table[node_ids] = torch.arange(node_ids.numel(), dtype=torch.int32) \
                if values is None else values.to(torch.int32)

    def rows(self, ids: Tensor, num_nodes: int) -> Tensor:
        """Local rows (or ``values``) of the 1-D int64 ``ids``: int32 from
        the table, int64 otherwise (torch's gathers take either).

        Raises:
            StoreError: if an id lies outside ``[0, num_nodes)`` or is not
                owned by this part.
        """
        if self.table is None:
            check_range(ids, num_nodes, self.what)
            try:
                rows = local_rows(self.node_ids, ids)
            except StoreError as exc:
                raise StoreError(f"part {self.part}, {self.what} ids: {exc}") from exc
            return rows if self.values is None else self.values.index_select(0, rows)
        try:
            # The table spans every global id, so torch's bounds check of
            # this gather is the range check: fewer ops on the common path
            # of a small request, where each one costs more than its work.
            rows = self.table.index_select(0, ids)
        except IndexError:
            check_range(ids, num_nodes, self.what)
            raise
        if ids.numel() and int(rows.min()) < 0:
            bad = ids[rows < 0]
            shown = ", ".join(str(i) for i in bad[:8].tolist())
            more = ", ..." if bad.numel() > 8 else ""
            raise StoreError(f"part {self.part}: {bad.numel()} of {ids.numel()} {self.what} "
                             f"ids are not owned by this part ({shown}{more}); route them "
                             f"with the {'edge' if self.what == 'edge' else 'partition'} book")
        return rows


def check_range(ids: Tensor, num_nodes: int, what: str = "node") -> None:
    if ids.numel():
        low, high = (int(v) for v in torch.aminmax(ids))
        if low < 0 or high >= num_nodes:
            raise StoreError(f"{what} ids must lie in [0, {num_nodes}); got the range "
                             f"[{low}, {high}]")


@dataclass(frozen=True)
class Csc:
    colptr: Tensor
    deg: Tensor  # colptr.diff() (8 bytes a node): one gather per request, not three ops
    row: Tensor
    edge_ids: Tensor
    dst: LocalIndex  # owned global ids of the destination node type
    max_deg: int  # bounds a request's answer and work without a gather


def edge_type_arg(value: Any) -> Any:
    """``None`` or a ``[src, rel, dst]`` list from msgpack (its form checked
    by the op's schema) -> store key."""
    return None if value is None else tuple(value)


def page(args: dict[str, Any], total: int) -> tuple[int, int]:
    """``[start, stop)`` of the ``total`` positions a paged request (``start``,
    ``count``) asks for.

    Raises:
        ProtocolError: if ``start`` lies past the end.
    """
    start, count = args.get("start", 0), args.get("count")
    if start > total:
        raise ProtocolError(f"argument 'start' must be an int in [0, {total}], got {start}")
    return start, total if count is None else min(total, start + count)


def sampled_count(deg: Tensor, k: int, replace: bool) -> int:
    """Exact number of neighbours ``sample`` returns for these degrees."""
    if k == -1:
        return int(deg.sum())
    if replace:
        return k * int((deg > 0).sum())
    return int(deg.clamp(max=k).sum())


def seeded_generator(seed: Optional[int]) -> torch.Generator:
    """A generator seeded with ``seed`` (same seed, same draws), or from the
    OS when ``None``."""
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def attrs_arg(args: dict[str, Any], specs: dict[str, dict[str, Any]], noun: str,
              owner: str) -> tuple[list[str], int]:
    """A request's ``attrs``, checked against the served ``specs``, and the
    bytes one row of all of them takes.

    Args:
        args: The request's arguments.
        specs: ``{name: {"dtype", "shape"}}`` of what is served.
        noun: What an attribute is called in errors (``"feature"``).
        owner: Whose attributes they are (``"node type 'v0'"``).
    """
    attrs = args["attrs"]
    unknown = [a for a in attrs if a not in specs]
    if unknown:
        raise StoreError(f"unknown {noun}(s) {describe(unknown)} of {owner}; it has "
                         f"{sorted(specs)}")
    row_bytes = sum(math.prod(specs[a]["shape"]) * DTYPES[specs[a]["dtype"]].itemsize
                    for a in attrs)
    return attrs, row_bytes


def split_by_sizes(args: dict[str, Any], tensors: list[Tensor], count: int, op: str,
                   max_tensors: int = 1) -> list[list[Tensor]]:
    """The per-entry slices of a request that batches ``count`` entries (node
    types of ``get``, edge types of ``sample``): its ``sizes``
    argument (one count per entry) cuts each of its 1 to
    ``max_tensors`` aligned 1-D tensors, entry after entry.

    Raises:
        ProtocolError: on sizes of the wrong count, or tensors whose length
            is not their sum.
    """
    sizes = args.get("sizes")
    if sizes is None or len(sizes) != count:
        raise ProtocolError(f"argument 'sizes' must list one count per entry ({count}), got "
                            f"{describe(sizes)}")
    total = sum(sizes)
    if not 1 <= len(tensors) <= max_tensors or any(
            t.dim() != 1 or t.numel() != total for t in tensors):
        raise ProtocolError(f"{op} takes the ids of every entry, one after another, as 1-D "
                            f"tensors of {total} entries (the sum of 'sizes'); got "
                            f"{len(tensors)} tensors of shapes "
                            f"{[list(t.shape) for t in tensors][:4]}")
    out, start = [], 0
    for size in sizes:
        out.append([t[start:start + size] for t in tensors])
        start += size
    return out
