"""Fetching rows (node or edge attributes) from the servers that own them.

A feature request names rows by global id; the ids are grouped by owning
server (a node type's partition book, or an edge type's edge book), every
server's share goes out as one request (split further where the answer
would exceed the server's reply limit; the node-feature shares of several
node types for one server merged into one ``get``), *all* the
requests of a batch fly at once, and every answer's rows are copied into the
caller's order (or, for a server on this host, written there by the
server itself: :mod:`pyg_dist.rpc.shm.outputs`). The
node features of :class:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore`
(``get``) and the edge attributes of
:class:`~pyg_dist.store.edge_fetch.EdgeFeatureFetcher` (``get_edges``) go
through :func:`fetch_rows` together, so a batch's node and edge attributes
cost one round trip.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import StoreError
from pyg_dist.rpc.retrying import FirstAttempt
from pyg_dist.rpc.shm import MIN_BYTES

logger = logging.getLogger(__name__)

# Widest element types a row is copied as, with their sizes in bytes.
_COPY_DTYPES = ((torch.complex128, 16), (torch.int64, 8), (torch.int32, 4),
                (torch.int16, 2), (torch.uint8, 1))


def copy_rows(out: Tensor, positions: Tensor, rows: Tensor) -> None:
    """``out[positions] = rows`` for contiguous tensors of one dtype.

    ``index_copy_`` moves one element at a time, so a row of 128 float32
    costs 128 moves; the rows are reinterpreted as the widest type their
    byte size allows (16-byte elements: 8 moves), which copies the same bits
    (a float NaN's payload included) 20-25% faster. Anything else falls back to
    a plain ``index_copy_``.

    Args:
        out: Destination, ``[N, ...]``.
        positions: int64 rows of ``out`` to fill, one per row of ``rows``.
        rows: Source, ``[len(positions), ...]``, same dtype and row shape.
    """
    if positions.numel() == 0:
        return  # nothing to copy (and an empty view cannot be widened)
    row_bytes = out[0].numel() * out.element_size() if out.numel() else 0
    if out.is_contiguous() and rows.is_contiguous() and out.dtype == rows.dtype \
            and row_bytes and out.dtype != torch.bool:
        for dtype, size in _COPY_DTYPES:
            if row_bytes % size == 0 and out.data_ptr() % size == 0 \
                    and rows.data_ptr() % size == 0:
                wide_out = out.view(out.size(0), -1).view(torch.uint8).view(dtype)
                wide_rows = rows.view(rows.size(0), -1).view(torch.uint8).view(dtype)
                wide_out.index_copy_(0, positions, wide_rows)
                return
    out.index_copy_(0, positions, rows)


@dataclass
class RowRequest:
    """Rows of several attributes of one node or edge type, for some ids.

    Args:
        op: The server operation (``"get"`` or ``"get_edges"``).
        args: Its arguments, the same for every server (type and names).
        names: The attributes, in the order the answer carries them.
        outs: One tensor per attribute, ``[len(ids), *shape]``, to fill.
        shares: ``(part, positions, ids[positions])`` per owning server.
        placement: The :class:`~pyg_dist.rpc.shm.outputs.OutputLease` the
            outputs lie in, when same-host servers write their rows there.
    """

    op: str
    args: dict[str, Any]
    names: list[str]
    outs: list[Tensor]
    shares: list[tuple[int, Tensor, Tensor]]
    placement: Any = None


def row_request(op: str, args: dict[str, Any], names: Sequence[str],
                infos: Sequence[Any], num_ids: int,
                shares: list[tuple[int, Tensor, Tensor]],
                reply_limits: Sequence[Optional[int]], pin: bool,
                pool: Any = None) -> RowRequest:
    """A :class:`RowRequest` whose outputs are allocated (in pinned memory
    with ``pin``; in a segment of ``pool`` for same-host servers to write
    into, when it has room and one of them owns rows) and whose shares fit
    the servers' reply limits.

    Args:
        op, args, names: See :class:`RowRequest`.
        infos: Per name, its ``dtype`` and row ``shape``.
        num_ids: Rows asked for.
        shares: ``(part, positions, ids[positions])`` per owning server.
        reply_limits: Each part's ``max_reply_bytes`` (``None``: no limit).
        pin: The outputs go to a CUDA device: page-locked memory (a
            page-locked segment of ``pool``, else pinned tensors).
        pool: An :class:`~pyg_dist.rpc.shm.outputs.OutputPool` (``op``
            ``"get"`` only).
    """
    row_bytes = sum(math.prod(info.shape) * info.dtype.itemsize for info in infos)
    placement = None
    if pool is not None and num_ids * row_bytes >= MIN_BYTES and \
            any(pool.places(part) for part, _, _ in shares):
        # Bound for a GPU (pin): the segment is page-locked, so the servers
        # write into memory the copy to the device reads as it is.
        # A `get`'s shares go into the segment too (`place.index`): the
        # same-host servers read their ids and output rows there.
        placement = pool.lease([(info.dtype, (num_ids, *info.shape)) for info in infos],
                               page_locked=pin, index_ids=num_ids if op == "get" else 0)
    if placement is not None:
        outs = placement.tensors
    else:
        outs = [torch.empty((num_ids, *info.shape), dtype=info.dtype, pin_memory=pin)
                for info in infos]
    return RowRequest(op, dict(args), list(names), outs,
                      within_reply_limits(shares, row_bytes, reply_limits), placement)


def within_reply_limits(shares: list[tuple[int, Tensor, Tensor]], row_bytes: int,
                        reply_limits: Sequence[Optional[int]]
                        ) -> list[tuple[int, Tensor, Tensor]]:
    """Splits every share whose answer would exceed its server's reply limit
    into shares that fit (they fly together like the others)."""
    out = []
    for part, positions, part_ids in shares:
        limit = reply_limits[part] if part < len(reply_limits) else None
        if limit is None or positions.numel() * row_bytes <= limit:
            out.append((part, positions, part_ids))
            continue
        step = max(1, int(limit) // max(1, row_bytes))
        out += [(part, positions[i:i + step], part_ids[i:i + step])
                for i in range(0, positions.numel(), step)]
    return out


def fetch_rows(router: Any, requests: Sequence[RowRequest], timeout: Optional[float] = None,
               reply_limits: Optional[Sequence[Optional[int]]] = None) -> None:
    """Sends every share of every request at once and fills the outputs.

    The ``get`` shares that go to one server are merged into one
    ``get`` call of several groups (as many as its reply limit allows), so a batch asks
    each server once for the rows of all its node types. Each call says how
    many bytes its answer takes, so that the RPC client can lend a
    same-host server shared memory for it; replies are released once their
    rows are copied out. A request whose outputs lie in an output segment
    (``placement``) sends each same-host server's share as a ``get`` with
    ``place`` as its first attempt: that server writes its rows into the
    outputs itself, and nothing is copied (see :mod:`pyg_dist.rpc.shm.outputs`;
    a re-send, if the retry layer makes one, is the plain ``get``).

    Args:
        router: ``call_all(requests, timeout=, reply_bytes=, first=)`` and
            ``endpoints`` (see :class:`~pyg_dist.routing.id_router.Router`).
        requests: What to fetch; their ``outs`` are filled in place.
        timeout: Deadline of every call; ``None`` uses the router's.
        reply_limits: Each part's ``max_reply_bytes``; merged calls stay
            within it (``None``: no limit known).

    Returns:
        How many rows the trainer copied out of replies (those no server
        wrote in place): ``0`` when every owner of a row wrote it in place.

    Raises:
        StoreError: on an answer of the wrong shape, dtype or tensor count.
    """
    pieces = []  # (part, positions, request, ids, bytes)
    for request in requests:
        row_bytes = sum(math.prod(out.shape[1:]) * out.element_size() for out in request.outs)
        for part, positions, part_ids in request.shares:
            pieces.append((part, positions, request, part_ids, positions.numel() * row_bytes))
    if not pieces:
        return 0
    calls, sizes, targets, placed = [], [], [], []
    for group in _merged(pieces, reply_limits or []):
        part = group[0][0]
        lease = group[0][2].placement
        if len(group) == 1 and lease is not None and lease.pool.places(part):
            placed.append(group)
            continue
        if len(group) == 1:
            _, positions, request, part_ids, size = group[0]
            calls.append((part, request.op, request.args, [part_ids]))
        else:
            calls.append((part, group[0][2].op, {
                "groups": [p[2].args["groups"][0] for p in group],
                "sizes": [p[3].numel() for p in group]}, [torch.cat([p[3] for p in group])]))
        sizes.append(sum(p[4] for p in group))
        targets.append(group)
    # The placed calls go first: their servers write while the others' rows
    # travel and are copied.
    firsts = [_placed_first(group) for group in placed] + [None] * len(calls)
    calls = [_call(group) for group in placed] + calls
    sizes = [None] * len(placed) + sizes
    try:
        copied = _fetch(router, calls, sizes, placed + targets, timeout, firsts)
        for group in placed:  # every server asked answered: the segment's file goes
            group[0][2].placement.settle()
        return copied
    except BaseException:
        for group in placed:  # a late attempt may still write into it
            group[0][2].placement.lost(group[0][0])
        raise


def _call(group: list[tuple]) -> tuple[int, str, dict[str, Any], list[Tensor]]:
    part, _, request, part_ids, _ = group[0]
    return part, request.op, request.args, [part_ids]


def _placed_first(group: list[tuple]) -> FirstAttempt:
    """The first attempt of a one-piece ``get`` to a same-host server: it
    writes its rows into the outputs; re-sends are the plain ``get``,
    whose rows are copied. A ``get``'s ids and output rows are written
    into the segment (``place.index``) and no tensors travel; an
    ``emb_read``'s travel as tensors."""
    part, positions, request, part_ids, _ = group[0]
    placement = request.placement

    def given_up(refused: bool) -> None:
        if refused:  # it could not map them and wrote nothing
            placement.refused(part)
        else:  # a late first attempt may still write into them: never reuse,
            placement.lost(part)  # and the server is told to unmap them

    place = placement.arg(part)
    index = placement.index_share(part_ids, positions) if request.op == "get" else None
    if index is None:
        return FirstAttempt({**request.args, "place": place}, [part_ids, positions], given_up)
    return FirstAttempt({**request.args, "place": {**place, "index": index}}, [], given_up)


def _fetch(router: Any, calls: list[tuple], sizes: list[Optional[int]],
           targets: list[list[tuple]], timeout: Optional[float],
           firsts: Optional[list[Optional[FirstAttempt]]] = None) -> int:
    """Makes ``calls`` at once and copies their rows out (a placed call's
    server wrote them in place: nothing to copy); returns the rows copied."""
    if not calls:
        return 0
    kwargs: dict[str, Any] = {"reply_bytes": sizes}
    if timeout is not None:
        kwargs["timeout"] = timeout
    if firsts is not None:
        kwargs["first"] = firsts
    replies = router.call_all(calls, **kwargs)
    copied = 0
    try:
        for group, reply in zip(targets, replies):
            if reply.result.get("placed") is True:  # checked against GET
                group[0][2].placement.placed(group[0][0])
                continue
            _take_group(router.endpoints[group[0][0]], group, reply)
            copied += sum(piece[1].numel() for piece in group)
        return copied
    finally:
        for reply in replies:  # rows copied out: lent memory may be reused
            reply.release()


def _merged(pieces: list[tuple], reply_limits: Sequence[Optional[int]]) -> list[list[tuple]]:
    """The pieces as calls: every ``get`` piece of one part joins that part's
    open ``get`` call while the answer stays within its reply limit;
    other pieces, and those its server writes in place (a heterogeneous
    batch's node types then cost one ``get`` each, and no copy), are calls
    of their own."""
    calls: list[list[tuple]] = []
    open_call: dict[int, list[tuple]] = {}
    for piece in pieces:
        part, request = piece[0], piece[2]
        placed = request.placement is not None and request.placement.pool.places(part)
        if request.op != "get" or placed:
            calls.append([piece])
            continue
        limit = reply_limits[part] if part < len(reply_limits) else None
        current = open_call.get(part)
        if current is not None and (limit is None or
                                    sum(p[4] for p in current) + piece[4] <= limit):
            current.append(piece)
            continue
        open_call[part] = [piece]
        calls.append(open_call[part])
    return calls


def _take_group(address: str, group: list[tuple], reply: Any) -> None:
    """Copies one reply's rows out: the pieces' tensors one after another."""
    tensors = list(reply.tensors)
    expected = sum(len(p[2].names) for p in group)
    op = group[0][2].op
    if len(tensors) != expected:
        raise StoreError(f"server {address} answered {op!r} with {len(tensors)} tensors "
                         f"for {expected} attributes")
    start = 0
    for _, positions, request, _, _ in group:
        count = len(request.names)
        _take_rows(address, positions, tensors[start:start + count], request)
        start += count


def _take_rows(address: str, positions: Tensor, tensors: list[Tensor],
               request: RowRequest) -> None:
    for out, name, tensor in zip(request.outs, request.names, tensors):
        expected = (positions.numel(), *out.shape[1:])
        if tuple(tensor.shape) != expected:
            raise StoreError(f"server {address} sent {name!r} of shape "
                             f"{tuple(tensor.shape)}, expected {expected}")
        copy_rows(out, positions, tensor.to(out.dtype))
