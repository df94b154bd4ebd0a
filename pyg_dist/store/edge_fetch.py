"""Edge attributes fetched from the partition servers by global edge id (the
trainer's side of ``get_edges``; ``pyg_dist.server.edge_features`` serves them).

An edge is stored by the part that owns its destination, with its
attributes (``edge_attr``, ``edge_weight``, ...). The trainer knows a
node's owner from the partition book, but not an edge's: it has no
topology. :class:`EdgeFeatureFetcher` therefore builds an *edge book* once
per edge type, on first use (the ``edge_ids`` op of every server: each
part's global edge ids, sorted, in pages within the reply limit; 1 byte per
edge up to 127 parts, 2 beyond), and then fetches rows like the feature
store fetches node rows: one ``get_edges`` request per owning server, all in
flight at once, each within its server's reply limit (a bigger share is
split), each saying how many bytes its answer takes (so a server on the same
host can write it into memory the RPC client lends), rows put back in the
caller's order.

It talks to the servers through a router (:class:`pyg_dist.routing.id_router.Router`
or anything with ``num_parts``, ``endpoints`` and ``call_all(requests,
timeout=None, reply_bytes=None)`` returning replies with ``.result``,
``.tensors`` and ``.release()``). :meth:`EdgeFeatureFetcher.from_meta`
builds one from the servers' ``meta`` results.

Example (what a feature store does for ``TensorAttr(edge_type, "edge_attr",
e_id)``)::

    fetcher = EdgeFeatureFetcher.from_meta(router, metas)
    request = fetcher.row_request(None, batch.e_id, ["edge_attr"])
    fetch_rows(router, [request])  # with the batch's node rows, in one round trip
    edge_attr, = request.outs
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import StoreError
from pyg_dist.partitioning.book import shares_by_part
from pyg_dist.protocol.ops import EDGE_IDS, GET_EDGES, wire_edge_type
from pyg_dist.routing.row_fetch import RowRequest, row_request
from pyg_dist.rpc.wire_format import DTYPES
from pyg_dist.rpc.wire_values import describe

if TYPE_CHECKING:
    from pyg_dist.routing.id_router import Router

EdgeType = Optional[tuple[str, str, str]]

@dataclass(frozen=True)
class EdgeFeatureInfo:
    """What the servers report about one edge attribute.

    Args:
        dtype: Its torch dtype.
        shape: Its shape *without* the edge dimension (``()`` for a weight).
    """

    dtype: torch.dtype
    shape: tuple[int, ...]


def edge_type_key(edge_type: Any) -> EdgeType:
    """``None`` or a ``(src, rel, dst)`` tuple from a tuple or list.

    Raises:
        StoreError: for anything else.
    """
    if edge_type is None:
        return None
    if isinstance(edge_type, (tuple, list)) and len(edge_type) == 3 \
            and all(isinstance(t, str) for t in edge_type):
        return tuple(edge_type)  # type: ignore[return-value]
    raise StoreError(f"an edge type is None (homogeneous graph) or (src, rel, dst), got "
                     f"{type(edge_type).__name__}")


def _infos(features: Mapping[str, Any]) -> dict[str, EdgeFeatureInfo]:
    """``{name: {dtype, shape, ...}}`` as a ``meta`` reports it -> infos."""
    out = {}
    for name, spec in features.items():
        dtype = DTYPES.get(spec.get("dtype")) if isinstance(spec, Mapping) else None
        if dtype is None:
            raise StoreError(f"a server's meta reports edge attribute {name!r} with an "
                             f"unknown dtype; expected one of {sorted(DTYPES)}")
        out[name] = EdgeFeatureInfo(dtype, tuple(int(s) for s in spec["shape"]))
    return out


class EdgeFeatureFetcher:
    """Requests for rows of edge attributes, to the servers that store the
    edges (:meth:`row_request`).

    Thread-safe: several threads may ask at once; each edge type's book is
    built once, by the first thread that needs it.

    Args:
        router: Sends requests to the servers (``num_parts``, ``endpoints``
            ordered by part, ``call_all``).
        features: Edge type (``None`` for a homogeneous graph) -> attribute
            name -> :class:`EdgeFeatureInfo`.
        num_edges: Edge type -> number of edges of that type in the graph.
        reply_limits: Each part's server's ``max_reply_bytes`` (from its
            ``meta``); a request whose answer would be bigger is split.
            ``None``: no limit known.
        timeout: Deadline of every call; ``None`` uses the router's.
    """

    def __init__(self, router: Router, features: Mapping[Any, Mapping[str, EdgeFeatureInfo]],
                 num_edges: Mapping[Any, int],
                 reply_limits: Optional[Sequence[Optional[int]]] = None,
                 timeout: Optional[float] = None) -> None:
        self.router = router
        self.num_parts = int(router.num_parts)
        if self.num_parts > 32767:
            raise StoreError(f"an edge book holds at most 32767 parts, got {self.num_parts}")
        self.features = {edge_type_key(t): dict(f) for t, f in features.items()}
        self.num_edges = {edge_type_key(t): int(n) for t, n in num_edges.items()}
        missing = [t for t in self.features if t not in self.num_edges]
        if missing:
            raise StoreError(f"no edge count given for edge type(s) {missing}")
        self.reply_limits = list(reply_limits or [None] * self.num_parts)
        self.timeout = timeout
        self._books: dict[EdgeType, Tensor] = {}
        self._lock = threading.Lock()
        self._type_locks: dict[EdgeType, threading.Lock] = {}
        self._pid = os.getpid()

    @classmethod
    def from_meta(cls, router: Router, metas: Sequence[Mapping[str, Any]],
                  timeout: Optional[float] = None) -> EdgeFeatureFetcher:
        """Builds a fetcher from every part's ``meta`` result, ordered by part.

        A homogeneous graph's edge attributes are ``edge_features``; a
        heterogeneous graph's are in ``edge_types[].features``. Servers that
        predate edge attributes report none.

        Raises:
            StoreError: if no meta is given or a dtype is unknown.
        """
        if not metas:
            raise StoreError("from_meta needs the meta of every part")
        first = metas[0]
        if first.get("is_hetero"):
            entries = first.get("edge_types", [])
            features = {edge_type_key(e["type"]): _infos(e.get("features", {}))
                        for e in entries}
            num_edges = {edge_type_key(e["type"]): int(e["num_edges"]) for e in entries}
        else:
            features = {None: _infos(first.get("edge_features", {}))}
            num_edges = {None: int(first["num_edges"])}
        limits = [m.get("max_reply_bytes") for m in metas]
        return cls(router, features, num_edges, limits, timeout)

    # What is served ########################################################

    @property
    def edge_types(self) -> list[EdgeType]:
        """The edge types (``[None]`` for a homogeneous graph)."""
        return list(self.features)

    def info(self, edge_type: Any, name: str) -> Optional[EdgeFeatureInfo]:
        """The attribute's dtype and row shape, or ``None`` if not served."""
        return self.features.get(edge_type_key(edge_type), {}).get(name)

    def attrs(self) -> list[tuple[EdgeType, str]]:
        """Every ``(edge_type, name)`` served."""
        return [(t, name) for t, names in self.features.items() for name in names]

    def _known(self, edge_type: Any, names: Any) -> tuple[EdgeType, list[EdgeFeatureInfo]]:
        key = edge_type_key(edge_type)
        if key not in self.features:
            raise StoreError(f"no edge type {key!r} on the servers; they hold "
                             f"{self.edge_types}")
        if not isinstance(names, (list, tuple)) or not names or \
                not all(isinstance(n, str) for n in names):
            raise StoreError("names must be a non-empty list of edge attribute names")
        held = self.features[key]
        unknown = [n for n in names if n not in held]
        if unknown:
            raise StoreError(f"no edge attribute(s) {unknown} of edge type {key!r} on the "
                             f"servers; its edges hold {sorted(held) or 'none'}")
        return key, [held[n] for n in names]

    def check_ids(self, edge_type: Any, edge_ids: Any) -> Tensor:
        """Global int64 edge ids of ``edge_type``, checked (1-D integer, in
        ``[0, num_edges)``).

        Raises:
            StoreError: for another type, shape or dtype, or ids out of range.
        """
        key = edge_type_key(edge_type)
        if not isinstance(edge_ids, Tensor) or edge_ids.dim() != 1 \
                or edge_ids.is_floating_point() or edge_ids.is_complex() \
                or edge_ids.dtype == torch.bool:
            shown = f"dtype {edge_ids.dtype}, shape {tuple(edge_ids.shape)}" \
                if isinstance(edge_ids, Tensor) else type(edge_ids).__name__
            raise StoreError(f"edge ids must be a 1-D integer tensor, got {shown}")
        ids = edge_ids.to(device="cpu", dtype=torch.int64)
        n = self.num_edges.get(key, 0)
        if ids.numel():
            low, high = (int(v) for v in torch.aminmax(ids))
            if low < 0 or high >= n:
                raise StoreError(f"edge ids of {key!r} must lie in [0, {n}); got the range "
                                 f"[{low}, {high}]")
        return ids

    # The edge book #########################################################

    def book(self, edge_type: Any) -> Tensor:
        """The part that stores every edge of ``edge_type`` (int8 up to 127
        parts, int16 beyond), built from the servers on first use.

        Raises:
            StoreError: if the servers' answers do not cover every edge
                exactly once, or are malformed.
            RpcError: if a server fails to answer.
        """
        key = edge_type_key(edge_type)
        if key not in self.num_edges:
            raise StoreError(f"no edge type {key!r} on the servers; they hold "
                             f"{list(self.num_edges)}")
        book = self._books.get(key)
        if book is not None:
            return book
        with self._type_lock(key):
            book = self._books.get(key)
            if book is None:
                book = self._build_book(key)
                self._books[key] = book
        return book

    def _type_lock(self, key: EdgeType) -> threading.Lock:
        with self._lock_after_fork():
            return self._type_locks.setdefault(key, threading.Lock())

    def _lock_after_fork(self) -> threading.Lock:
        if self._pid != os.getpid():
            # A lock copied by fork may be held by a thread that is not here.
            self._lock = threading.Lock()
            self._type_locks = {}
            self._pid = os.getpid()
        return self._lock

    def _page_size(self, part: int) -> Optional[int]:
        limit = self.reply_limits[part] if part < len(self.reply_limits) else None
        return None if limit is None else max(1, int(limit) // 8)

    def _build_book(self, key: EdgeType) -> Tensor:
        n = self.num_edges[key]
        book = torch.full((n,), -1, dtype=torch.int8 if self.num_parts <= 127 else torch.int16)
        # The first page of every part at once; their totals say which pages
        # are left, asked for a few per part at a time (a round's replies
        # are held together until written into the book).
        totals = self._take_pages(key, book, [(part, 0) for part in range(self.num_parts)])
        rest = [(part, start) for part in range(self.num_parts)
                if (size := self._page_size(part)) is not None
                for start in range(size, totals[part], size)]
        step = 4 * self.num_parts
        for i in range(0, len(rest), step):
            self._take_pages(key, book, rest[i:i + step])
        if sum(totals.values()) != n or bool((book < 0).any()):
            missing = int((book < 0).sum())
            first = int((book < 0).nonzero()[0]) if missing else None
            raise StoreError(f"the servers store {sum(totals.values())} edges of {key!r}, "
                             f"the graph has {n}; {missing} are stored by none (first: "
                             f"{first}); are all parts of one dataset served?")
        return book

    def _take_pages(self, key: EdgeType, book: Tensor,
                    pages: list[tuple[int, int]]) -> dict[int, int]:
        """Asks for ``edge_ids`` pages ``(part, start)`` at once and writes
        them into ``book``; returns each part's total."""
        calls = [EDGE_IDS.request(part, {"edge_type": wire_edge_type(key), "start": start,
                                         "count": self._page_size(part)})
                 for part, start in pages]
        replies = self.router.call_all(calls) if self.timeout is None else \
            self.router.call_all(calls, timeout=self.timeout)
        try:
            return {part: self._take_page(key, book, part, start, reply)
                    for (part, start), reply in zip(pages, replies)}
        finally:
            for reply in replies:
                reply.release()

    def _take_page(self, key: EdgeType, book: Tensor, part: int, start: int,
                   reply: Any) -> int:
        """Writes one ``edge_ids`` page into ``book``; returns the part's total."""
        address = self.router.endpoints[part]
        total = reply.result["total"]  # present, and one tensor: checked against EDGE_IDS
        tensors = list(reply.tensors)
        if not isinstance(total, int) or isinstance(total, bool) or \
                not 0 <= total <= book.numel():
            raise StoreError(f"server {address} answered 'edge_ids' for {key!r} with a "
                             f"total of {describe(total)} edges; the graph has "
                             f"{book.numel()}")
        ids = tensors[0]
        size = self._page_size(part)
        expected = max(0, min(total, start + size) - start) if size else total - start
        if ids.dtype != torch.int64 or ids.dim() != 1 or ids.numel() != expected:
            raise StoreError(f"server {address} sent edge ids of {key!r} as {ids.dtype} "
                             f"of shape {tuple(ids.shape)}, expected {expected} int64")
        if ids.numel():
            low, high = (int(v) for v in torch.aminmax(ids))
            if low < 0 or high >= book.numel():
                raise StoreError(f"server {address} sent edge ids of {key!r} outside "
                                 f"[0, {book.numel()}): [{low}, {high}]")
            if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
                raise StoreError(f"server {address} sent edge ids of {key!r} that are not "
                                 f"sorted and distinct")
            seen = book.index_select(0, ids)
            if bool((seen >= 0).any()):
                twice = int(ids[seen >= 0][0])
                raise StoreError(f"edge {twice} of {key!r} is stored by two servers "
                                 f"({self.router.endpoints[int(seen[seen >= 0][0])]} "
                                 f"and {address}); serve the parts of one dataset")
            book.index_fill_(0, ids, part)
        return total

    # Rows ##################################################################

    def row_request(self, edge_type: Any, edge_ids: Tensor, names: Sequence[str], *,
                    pin: bool = False) -> RowRequest:
        """The ``get_edges`` requests for rows ``edge_ids`` of the edge
        attributes ``names`` of ``edge_type``, to send (together with other
        rows, a batch's node features) through
        :func:`~pyg_dist.routing.row_fetch.fetch_rows`.

        Args:
            edge_type: ``None`` for a homogeneous graph, else ``(src, rel, dst)``.
            edge_ids: Global edge ids of that type (1-D integer tensor, e.g.
                a batch's ``e_id``), any order, repeats allowed.
            names: Attribute names, e.g. ``["edge_attr"]``.
            pin: Assemble the rows in pinned memory (for a ``non_blocking``
                copy to a GPU).

        Returns:
            The request; once fetched, its ``outs`` hold one tensor per name,
            ``[len(edge_ids), *shape]``, rows in the order of ``edge_ids``.

        Raises:
            StoreError: on an unknown edge type or attribute, or ids that are
                not 1-D integer or out of range.
        """
        names = list(names) if isinstance(names, (list, tuple)) else names
        key, infos = self._known(edge_type, names)
        ids = self.check_ids(key, edge_ids)
        shares = self._split(key, ids) if ids.numel() else []
        args = {"edge_type": wire_edge_type(key), "attrs": names}
        return row_request(GET_EDGES.name, args, names, infos, ids.numel(), shares,
                           self.reply_limits, pin)

    def _split(self, key: EdgeType, ids: Tensor) -> list[tuple[int, Tensor, Tensor]]:
        """``[(part, positions, ids[positions]), ...]`` for every owning part."""
        owners = self.book(key).index_select(0, ids).long()
        if self.num_parts == 1:
            return [(0, torch.arange(ids.numel()), ids)]
        return shares_by_part(ids, torch.argsort(owners, stable=True),
                              torch.bincount(owners, minlength=self.num_parts).tolist())

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(edge_types={self.edge_types}, "
                f"num_parts={self.num_parts})")
