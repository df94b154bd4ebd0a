"""The pyg-dist wire protocol: msgpack header + raw tensor frames.

A message is a ZeroMQ multipart message. Frame 0 is a msgpack map (the
header); every further frame is the raw, C-contiguous bytes of one tensor
whose dtype and shape the header declares. Nothing is ever pickled.

Request header::

    {"version": 3, "id": <uint>, "op": <str>, "args": <map>,
     "tensors": [[<dtype>, [<dim>, ...]], ...], "shm": <map, optional>}

Reply header::

    {"version": 3, "id": <uint or nil>, "status": "ok", "result": <map>,
     "tensors": [[<dtype>, [<dim>, ...]], ...], "shm": [<offset>, ...]}
    {"version": 3, "id": <uint or nil>, "status": "error",
     "error": {"type": <str>, "message": <str>}}

``shm`` (optional) names a segment of shared memory the client lends for the
reply's tensors (:mod:`pyg_dist.rpc.shm`); a reply written into it lists each
tensor's offset there instead of sending frames. The full write-up lives in
``docs/wire-protocol.md``. Decoding validates the
whole structure (types, dtype whitelist, shape versus byte count, sizes)
before any tensor is built, and raises :class:`~pyg_dist.errors.ProtocolError`
with a message meant for the peer. Headers are read within the bounds of
:mod:`pyg_dist.rpc.wire_values` (size, container count and length, nesting),
``args`` and ``result`` nest at most :data:`MAX_ARGS_DEPTH` levels, every
other field has a fixed shape, and refused values are described by type and
size (:func:`~pyg_dist.rpc.wire_values.describe`), never ``repr``-ed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import msgpack
import torch
from torch import Tensor

from pyg_dist.dtypes import DTYPES
from pyg_dist.errors import ProtocolError
from pyg_dist.rpc import wire_values
from pyg_dist.rpc.wire_values import MAX_ID, describe

PROTOCOL_VERSION = 5


# The messages as the code sees them: a decoded request, a reply, an error
# reply.

@dataclass
class Request:
    """A decoded request.

    Args:
        id: The request id chosen by the client; echoed in the reply.
        op: The operation's name.
        args: The operation's msgpack-native arguments.
        tensors: The tensors sent with the request.
    """

    id: int
    op: str
    args: dict[str, Any] = field(default_factory=dict)
    tensors: list[Tensor] = field(default_factory=list)
    shm: Any = None  # the lent segment, checked where it is used


@dataclass
class Reply:
    """The answer to a successful call.

    Args:
        result: The operation's msgpack-native result.
        tensors: The tensors sent with the reply, or views into memory the
            client lent for them (valid until :meth:`release`).
        shm: Where a reply written into lent memory put its tensors:
            ``(dtype, shape, offset)`` each (the client turns them into
            ``tensors``).
    """

    result: dict[str, Any] = field(default_factory=dict)
    tensors: list[Tensor] = field(default_factory=list)
    shm: Optional[list[tuple[torch.dtype, list[int], int]]] = None
    on_release: Optional[Any] = field(default=None, repr=False, compare=False)

    def release(self) -> None:
        """Hands the memory the reply's tensors lie in back to the client for
        reuse (a no-op for tensors that came as frames). Call it once they
        are read; the tensors must not be used after."""
        hook, self.on_release = self.on_release, None
        if hook is not None:
            hook()


@dataclass
class ErrorReply:
    """A server-side failure as carried on the wire.

    Args:
        type: The error class name on the server.
        message: The error message, intact.
    """

    type: str
    message: str


# The only dtypes that may cross the wire are pyg_dist.dtypes.DTYPES; anything
# else is refused.
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}

MAX_NDIM = 8
MAX_TENSORS = 64
MAX_OP_LEN = 64
MAX_HEADER_BYTES = wire_values.MAX_HEADER_BYTES
MAX_ARGS_DEPTH = 8
# A result may carry a request's args one level down (an echo).
MAX_RESULT_DEPTH = 2 * MAX_ARGS_DEPTH

__all__ = ["DTYPES", "DTYPE_NAMES", "PROTOCOL_VERSION", "ErrorReply", "Reply", "Request",
           "decode_reply", "decode_request", "encode_error", "encode_reply", "encode_request",
           "peek_id", "tensor_frame"]

# Encoding ##################################################################


def tensor_frame(tensor: Tensor) -> tuple[list[Any], memoryview]:
    """Returns the header entry and the raw-bytes frame of one tensor.

    The frame is a view on the tensor's memory (no copy) when the tensor is
    already a contiguous CPU tensor.

    Args:
        tensor: The tensor to send; moved to the CPU and made contiguous.

    Raises:
        ProtocolError: if the dtype is not on the wire whitelist.
    """
    dtype = tensor.dtype
    name = DTYPE_NAMES.get(dtype)
    if name is None:
        raise ProtocolError(
            f"dtype {dtype} cannot be sent; allowed: {sorted(DTYPES)}")
    if tensor.is_cpu and tensor.is_contiguous() and dtype is not torch.bfloat16 \
            and tensor.numel():
        # Fast path (most frames): a byte view on the tensor's own memory.
        if tensor.requires_grad:
            tensor = tensor.detach()
        raw = memoryview(tensor.numpy()).cast("B")
    else:
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        # A uint8 view works for every dtype (bfloat16 has no numpy twin).
        raw = memoryview(flat.view(torch.uint8).numpy())
    return [name, [*tensor.shape]], raw


def _frames(header: dict[str, Any], tensors: Sequence[Tensor],
            shm_offsets: Optional[list[int]] = None) -> list[Any]:
    frames: list[Any] = [None]
    specs = []
    for tensor in tensors:
        if shm_offsets is not None:  # already in the client's memory
            specs.append([DTYPE_NAMES[tensor.dtype], [*tensor.shape]])
            continue
        spec, raw = tensor_frame(tensor)
        specs.append(spec)
        frames.append(raw)
    header["tensors"] = specs
    if shm_offsets is not None:
        header["shm"] = shm_offsets
    frames[0] = msgpack.packb(header, use_bin_type=True)
    return frames


def encode_request(req_id: int, op: str, args: Optional[dict[str, Any]],
                   tensors: Sequence[Tensor], shm: Optional[dict[str, Any]] = None
                   ) -> list[Any]:
    """Encodes a request into the frames to send.

    Args:
        req_id: The request id (unique among the client's pending calls).
        op: The operation's name.
        args: msgpack-native arguments (``None`` for none).
        tensors: Tensors to send as raw frames.
        shm: The segment lent for the reply (:mod:`pyg_dist.rpc.shm`).

    Raises:
        ProtocolError: if ``args`` are not msgpack-native or a dtype is not
            allowed.
    """
    header = {"version": PROTOCOL_VERSION, "id": req_id, "op": op,
              "args": args or {}}
    if shm is not None:
        header["shm"] = shm
    try:
        return _frames(header, tensors)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"arguments of {op!r} cannot be encoded: {exc}",
                            op=op) from exc


def encode_reply(req_id: Optional[int], result: dict[str, Any],
                 tensors: Sequence[Tensor], shm_offsets: Optional[list[int]] = None
                 ) -> list[Any]:
    """Encodes a successful reply.

    Args:
        req_id: The id of the request being answered.
        result: msgpack-native result map.
        tensors: Tensors to send as raw frames.
        shm_offsets: The tensors' offsets in the segment the client lent,
            when they were written there (no frames are sent then).
    """
    header = {"version": PROTOCOL_VERSION, "id": req_id, "status": "ok",
              "result": result}
    return _frames(header, tensors, shm_offsets)


def encode_error(req_id: Optional[int], error_type: str, message: str) -> list[Any]:
    """Encodes an error reply.

    Args:
        req_id: The id of the failed request, ``None`` if it was unreadable.
        error_type: The error class name.
        message: The error message.
    """
    header = {"version": PROTOCOL_VERSION, "id": req_id, "status": "error",
              "error": {"type": error_type, "message": message}}
    return [msgpack.packb(header, use_bin_type=True)]


# Decoding ##################################################################


def _buffer(frame: Any) -> memoryview:
    buf = getattr(frame, "buffer", None)  # zmq.Frame received with copy=False
    return buf if buf is not None else memoryview(frame)


def _unpack_header(raw: memoryview, tensors: int = MAX_TENSORS) -> dict[str, Any]:
    header = wire_values.unpack_header(raw, max(0, tensors - MAX_TENSORS))
    if type(header) is not dict:
        raise ProtocolError(f"header must be a map, got {describe(header)}")
    version = header.get("version")
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise ProtocolError(f"unsupported protocol version {describe(version)}; this "
                            f"side speaks version {PROTOCOL_VERSION}")
    return header


# What msgpack decodes a plain scalar to (exact types: it makes no subclasses).
_SCALARS = frozenset({type(None), bool, int, float, str, bytes})


def _check_plain(value: Any, what: str, max_depth: int, depth: int = 0) -> None:
    """Refuses anything but msgpack-native values (no ext types) nested at
    most ``max_depth`` levels; recurses no deeper than that. Scalar items
    are checked in the container's own loop: a call each cost ~1 s for a
    1 MiB header of a million of them."""
    kind = type(value)
    if kind is list:
        items: Any = value
    elif kind is dict:
        for key in value:
            if type(key) is not str:
                raise ProtocolError(f"{what} has a non-string key: {describe(key)}")
        items = value.values()
    elif kind in _SCALARS:
        return
    else:
        raise ProtocolError(f"{what} holds a {kind.__name__}, which is not a plain "
                            f"msgpack value")
    if not items:
        return
    if depth >= max_depth:  # the items would lie deeper than allowed
        raise ProtocolError(f"{what} nests deeper than {max_depth} levels")
    for item in items:
        if type(item) not in _SCALARS:
            _check_plain(item, what, max_depth, depth + 1)


def _spec(spec: Any, index: int) -> tuple[torch.dtype, Any, int]:
    # msgpack yields exact list/int/str types, so ``type(x) is`` checks are
    # exact here (and keep bools, a subclass of int, out of shapes).
    if type(spec) is not list or len(spec) != 2 or type(spec[1]) is not list:
        raise ProtocolError(f"tensor {index}: spec must be [dtype, shape], "
                            f"got {describe(spec)}")
    name, shape = spec
    dtype = DTYPES.get(name) if type(name) is str else None
    if dtype is None:
        raise ProtocolError(f"tensor {index}: dtype {describe(name)} is not allowed; "
                            f"allowed: {sorted(DTYPES)}")
    nbytes = dtype.itemsize
    for dim in shape:
        if type(dim) is not int or dim < 0:
            nbytes = -1
            break
        nbytes *= dim
    if nbytes < 0 or len(shape) > MAX_NDIM:
        raise ProtocolError(f"tensor {index}: shape must be at most "
                            f"{MAX_NDIM} non-negative ints, got {describe(shape)}")
    return dtype, shape, nbytes


def _tensor(buf: memoryview, dtype: torch.dtype, shape: list[int]) -> Tensor:
    if len(buf) == 0:
        return torch.empty(shape, dtype=dtype)
    if buf.readonly:  # plain bytes (not a zmq frame): torch wants writable memory
        buf = memoryview(bytearray(buf))
    tensor = torch.frombuffer(buf, dtype=dtype)
    # Frames may start at any byte offset inside libzmq's receive buffer;
    # copy the rare misaligned one (bytearrays are malloc-aligned) rather
    # than hand out misaligned tensors.
    if tensor.data_ptr() % dtype.itemsize:
        tensor = torch.frombuffer(bytearray(buf), dtype=dtype)
    return tensor if len(shape) == 1 else tensor.view(shape)


def _tensors(header: dict[str, Any], frames: Sequence[Any],
             max_tensors: int = MAX_TENSORS) -> list[Tensor]:
    specs = header.get("tensors", [])
    if type(specs) is not list:
        raise ProtocolError("header field 'tensors' must be a list")
    if len(specs) > max_tensors:
        raise ProtocolError(f"{len(specs)} tensors exceed the limit of "
                            f"{max_tensors}")
    if len(specs) != len(frames):
        raise ProtocolError(f"header declares {len(specs)} tensors but "
                            f"{len(frames)} tensor frames arrived")
    checked = []
    for i, spec in enumerate(specs):
        dtype, shape, nbytes = _spec(spec, i)
        buf = _buffer(frames[i])
        if nbytes != len(buf):
            raise ProtocolError(
                f"tensor {i}: dtype {spec[0]} and shape {shape} need {nbytes} "
                f"bytes but the frame holds {len(buf)}")
        checked.append((buf, dtype, shape))
    # Build tensors only once every frame passed.
    return [_tensor(buf, dtype, shape) for buf, dtype, shape in checked]


def peek_id(frames: Sequence[Any]) -> Optional[int]:
    """Best-effort request id of a message that failed to decode, read from
    the header's first bytes without decoding it whole (see
    :func:`~pyg_dist.rpc.wire_values.peek_id`). Never raises."""
    try:
        return wire_values.peek_id(_buffer(frames[0]))
    except Exception:  # no frames, or a frame without a buffer: no id
        return None


def decode_request(frames: Sequence[Any], max_bytes: int) -> Request:
    """Decodes and validates a request's frames (routing identity removed).

    Args:
        frames: Header frame followed by tensor frames.
        max_bytes: Largest accepted total size of all frames.

    Raises:
        ProtocolError: if anything about the message is malformed.
    """
    if not frames:
        raise ProtocolError("empty message")
    total = sum(len(_buffer(f)) for f in frames)
    if total > max_bytes:
        raise ProtocolError(f"request of {total} bytes exceeds this server's "
                            f"limit of {max_bytes} bytes; split it into "
                            f"smaller batches")
    header = _unpack_header(_buffer(frames[0]))
    req_id, op, args = header.get("id"), header.get("op"), header.get("args", {})
    if type(req_id) is not int or not 0 <= req_id <= MAX_ID:
        raise ProtocolError(f"request id must be an int in [0, 2**63), got {describe(req_id)}")
    if type(op) is not str or not 0 < len(op) <= MAX_OP_LEN:
        raise ProtocolError(f"op must be a non-empty string of at most "
                            f"{MAX_OP_LEN} characters, got {describe(op)}")
    if type(args) is not dict:
        raise ProtocolError(f"args must be a map, got {describe(args)}")
    _check_plain(args, "args", MAX_ARGS_DEPTH)
    shm = header.get("shm")
    _check_plain(shm, "shm", 3)
    return Request(req_id, op, args, _tensors(header, frames[1:]), shm)


def decode_reply(frames: Sequence[Any], max_tensors: int = MAX_TENSORS
                 ) -> tuple[Optional[int], Reply | ErrorReply]:
    """Decodes a reply's frames into its request id and content.

    Args:
        frames: Header frame followed by tensor frames.
        max_tensors: Most tensors the reply may carry: :data:`MAX_TENSORS`,
            or more where the request asked for more (3 per edge type of a
            ``sample``: :meth:`~pyg_dist.rpc.op_spec.OpSpec.reply_tensor_limit`
            of the op's declaration); the header's limits
            grow with it.

    Raises:
        ProtocolError: if the reply is malformed.
    """
    if not frames:
        raise ProtocolError("empty reply")
    header = _unpack_header(_buffer(frames[0]), max_tensors)
    req_id = header.get("id")
    if req_id is not None and type(req_id) is not int:
        raise ProtocolError(f"reply id must be an int or nil, got {describe(req_id)}")
    status = header.get("status")
    if type(status) is str and status == "error":
        error = header.get("error")
        if (type(error) is not dict or type(error.get("type")) is not str
                or type(error.get("message")) is not str):
            raise ProtocolError(f"malformed error reply: 'error' must be a map of 'type' "
                                f"and 'message' strings, got {describe(error)}")
        return req_id, ErrorReply(error["type"], error["message"])
    if type(status) is not str or status != "ok":
        raise ProtocolError(f"reply status must be 'ok' or 'error', got {describe(status)}")
    result = header.get("result", {})
    if type(result) is not dict:
        raise ProtocolError(f"result must be a map, got {describe(result)}")
    # The caller's code gets the result: nothing deeper than args may reach it.
    _check_plain(result, "result", MAX_RESULT_DEPTH)
    if "shm" in header:
        return req_id, Reply(result, [], _shm_layout(header, header["shm"], len(frames) - 1,
                                                     max_tensors))
    return req_id, Reply(result, _tensors(header, frames[1:], max_tensors))


def _shm_layout(header: dict[str, Any], offsets: Any, frames: int,
                max_tensors: int = MAX_TENSORS) -> list[tuple[torch.dtype, list[int], int]]:
    """``(dtype, shape, offset)`` of each tensor of a reply written into lent
    memory (whether they fit it is checked against the segment)."""
    specs = header.get("tensors", [])
    if type(specs) is not list or type(offsets) is not list or len(specs) != len(offsets) \
            or len(specs) > max_tensors or frames \
            or not all(type(o) is int and o >= 0 for o in offsets):
        raise ProtocolError(f"a reply into shared memory needs one offset per tensor and no "
                            f"tensor frames, got {describe(offsets)} and {frames} frames")
    return [(*_spec(spec, i)[:2], offset) for i, (spec, offset) in enumerate(zip(specs, offsets))]
