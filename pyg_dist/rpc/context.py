"""What a handler may ask the RPC layer about the call it serves.

A handler marked with :func:`uses_context` is called as ``handler(args,
tensors, ctx)``. It gets its output tensors from :meth:`CallContext.alloc`
instead of ``torch.empty``: when the client lent shared memory for the reply
(:mod:`pyg_dist.rpc.shm`), they lie in it and the reply carries only their
offsets; otherwise they are ordinary tensors, sent as frames. Either way the
handler returns them as its reply's tensors and knows nothing of the
transport.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar

import torch
from torch import Tensor

from pyg_dist.errors import ProtocolError, SharedMemoryError
from pyg_dist.rpc.shm import layout, view
from pyg_dist.rpc.shm.attached import AttachedSegments
from pyg_dist.rpc.wire_values import describe

MAX_PLACED_ROWS = 1 << 40
"""Most rows the outputs of a ``place`` argument may have."""

F = TypeVar("F", bound=Callable[..., Any])


def uses_context(handler: F) -> F:
    """Marks ``handler`` to be called with a :class:`CallContext` as its
    third argument.

    Args:
        handler: ``handler(args, tensors, ctx) -> (result, tensors)``.
    """
    handler.uses_context = True  # type: ignore[attr-defined]
    return handler


def wants_context(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` was marked with :func:`uses_context`."""
    return bool(getattr(handler, "uses_context", False))


class CallContext:
    """One call as its handler sees it.

    Args:
        segments: The server's mappings of its clients' segments.
        shm: The request's ``shm`` header field (unchecked: checked by
            ``segments`` on first use), or ``None`` when nothing was lent.
    """

    def __init__(self, segments: Optional[AttachedSegments], shm: Any = None) -> None:
        self._segments = segments
        self._shm = shm
        self._offsets: dict[int, int] = {}  # data_ptr of an output -> its offset

    @property
    def lent(self) -> bool:
        """Whether the client lent memory for the reply's tensors."""
        return self._shm is not None and self._segments is not None

    def alloc(self, specs: Sequence[tuple[torch.dtype, Sequence[int]]]) -> list[Tensor]:
        """Output tensors of the given dtypes and shapes, uninitialised: in
        the memory the client lent when it did, ordinary tensors otherwise.
        Call it once per call, after validating the request.

        Args:
            specs: ``(dtype, shape)`` of each output.

        Raises:
            SharedMemoryError: if the lent segment is malformed, unknown
                here, foreign, or too small (the client then asks again
                without lending).
        """
        segments = self._segments
        if self._shm is None or segments is None:
            return [torch.empty(tuple(shape), dtype=dtype) for dtype, shape in specs]
        sizes = [math.prod(shape) * dtype.itemsize for dtype, shape in specs]
        offsets, total = layout(sizes)
        payload = segments.payload(self._shm, total)
        outs = [view(payload, offset, dtype, shape)
                for offset, (dtype, shape) in zip(offsets, specs)]
        self._offsets = {out.data_ptr(): offset for out, offset in zip(outs, offsets)}
        return outs

    def placed(self, arg: Any, specs: Sequence[tuple[torch.dtype, Sequence[int]]]
                ) -> list[Tensor]:
        """The whole outputs a request's ``place`` argument names: its client
        allocated them in a segment lent to every server on its host
        (:mod:`pyg_dist.rpc.shm.outputs`), and the handler writes its rows
        into them at positions the request gives (which the handler checks
        against ``rows``).

        Args:
            arg: The ``place`` argument (unchecked): ``{"shm": segment spec,
                "offsets": [byte offset of each output], "rows": int}``.
            specs: ``(dtype, row shape)`` of each output.

        Returns:
            One ``[rows, *shape]`` tensor per spec, inside the segment.

        Raises:
            ProtocolError: if the argument is malformed.
            SharedMemoryError: if the segment is unknown here, foreign, or an
                output does not lie inside it (the client then asks again
                without placing).
        """
        if self._segments is None:
            raise SharedMemoryError("this server takes no shared memory")
        offsets = arg.get("offsets") if isinstance(arg, dict) else None
        rows = arg.get("rows") if isinstance(arg, dict) else None
        if not isinstance(offsets, list) or len(offsets) != len(specs) or not all(
                isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets):
            raise ProtocolError(f"argument 'place' must hold 'offsets', one non-negative int "
                                f"per output ({len(specs)}), got {describe(offsets)}")
        if not isinstance(rows, int) or isinstance(rows, bool) or \
                not 0 <= rows <= MAX_PLACED_ROWS:
            raise ProtocolError(f"'place.rows' must be an int in [0, {MAX_PLACED_ROWS}], got "
                                f"{describe(rows)}")
        shapes = [(rows, *shape) for _, shape in specs]
        end = max((o + math.prod(shape) * dtype.itemsize
                   for o, (dtype, _), shape in zip(offsets, specs, shapes)), default=0)
        payload = self._segments.payload(arg.get("shm"), end)
        return [view(payload, o, dtype, shape)
                for o, (dtype, _), shape in zip(offsets, specs, shapes)]

    def placed_index(self, arg: Any) -> tuple[Tensor, Tensor]:
        """The ids and output rows a ``place`` argument's ``index`` field
        names in its segment (``{"offset": bytes into the payload, "count":
        n}``: ``n`` int64 ids, then ``n`` int64 rows), copied out: the
        client may write into its segment at any time, and what the
        handler checks must be what it uses.

        Raises:
            ProtocolError: if the field is malformed.
            SharedMemoryError: as :meth:`placed` (also: the region does not
                lie inside the segment).
        """
        offset, count = self._region(arg.get("index") if isinstance(arg, dict) else None,
                                     "count", MAX_PLACED_ROWS, "'place.index'")
        payload = self._segments.payload(arg.get("shm"), offset + 16 * count)
        both = view(payload, offset, torch.int64, (2 * count,)).clone()
        return both[:count], both[count:]

    def placed_room(self, arg: Any, room: Any) -> Tensor:
        """The int64 slots ``room`` (``{"offset": bytes into the payload, a
        multiple of 8, "slots": n}``) of the segment a ``place`` argument
        names, to write shares into for other servers to read
        (:meth:`placed_index`): its client lent them for that.

        Raises:
            ProtocolError: if ``room`` is malformed.
            SharedMemoryError: as :meth:`placed` (also: the room does not
                lie inside the segment).
        """
        offset, slots = self._region(room, "slots", 2 * MAX_PLACED_ROWS, "a room")
        shm = arg.get("shm") if isinstance(arg, dict) else None
        payload = self._segments.payload(shm, offset + 8 * slots)
        return view(payload, offset, torch.int64, (slots,))

    def _region(self, value: Any, count_key: str, most: int, what: str) -> tuple[int, int]:
        """``(offset, count)`` of a ``{"offset", count_key}`` region of int64
        entries in a segment, checked (an offset in bytes, a multiple of 8).

        Raises:
            SharedMemoryError: if this server takes no shared memory.
            ProtocolError: if the region is malformed.
        """
        if self._segments is None:
            raise SharedMemoryError("this server takes no shared memory")
        offset = value.get("offset") if isinstance(value, dict) else None
        count = value.get(count_key) if isinstance(value, dict) else None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 \
                or offset % 8 or not isinstance(count, int) or isinstance(count, bool) \
                or not 0 <= count <= most or set(value) != {"offset", count_key}:
            raise ProtocolError(f"{what} must be {{offset: a non-negative multiple of 8, "
                                f"{count_key}: an int in [0, {most}]}}, got {describe(value)}")
        return offset, count

    def reply_offsets(self, tensors: Sequence[Tensor]) -> Optional[list[int]]:
        """The offsets in the lent segment of a reply's ``tensors``, or
        ``None`` when they travel as frames (nothing was allocated there).

        Raises:
            RuntimeError: if some but not all of them lie in the segment (a
                handler bug: one reply travels one way).
        """
        if not self._offsets:
            return None
        offsets = [self._offsets.get(t.data_ptr()) if t.numel() else 0 for t in tensors]
        if any(o is None for o in offsets):
            raise RuntimeError("a reply's tensors must all come from CallContext.alloc "
                               "when the client lent memory")
        return offsets  # type: ignore[return-value]
