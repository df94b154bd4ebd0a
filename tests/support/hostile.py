"""Hand-made hostile msgpack headers for tests.

msgpack's own packer refuses to nest deeper than 511 levels, so deep values
are written byte by byte: ``0x91`` opens an array of one item, repeated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from pyg_dist.rpc import wire_format


@dataclass(frozen=True)
class Raw:
    """Bytes placed verbatim as a value by :func:`raw_map`."""

    data: bytes


def nested(depth: int, leaf: Any = 1) -> Raw:
    """``[[[...leaf...]]]``, ``depth`` arrays deep."""
    return Raw(b"\x91" * depth + msgpack.packb(leaf))


def empty_maps(count: int) -> Raw:
    """An array of ``count`` empty maps: one byte on the wire each."""
    return Raw(b"\xdd" + count.to_bytes(4, "big") + b"\x80" * count)


def raw_map(fields: dict[str, Any]) -> bytes:
    """A msgpack map of ``fields`` in order; :class:`Raw` values go in as
    they are, the others are packed."""
    out = bytearray(b"\xdf" + len(fields).to_bytes(4, "big"))
    for key, value in fields.items():
        out += msgpack.packb(key)
        out += value.data if isinstance(value, Raw) else msgpack.packb(value, use_bin_type=True)
    return bytes(out)


def request_header(req_id: Any = 1, op: Any = "echo", args: Any = None, tensors: Any = (),
                   **extra: Any) -> bytes:
    """A request header whose fields may be :class:`Raw` (hostile) values;
    ``version`` and ``id`` first, as our encoder writes them."""
    fields = {"version": extra.pop("version", wire_format.PROTOCOL_VERSION), "id": req_id,
              "op": op, "args": {} if args is None else args,
              "tensors": tensors if isinstance(tensors, Raw) else [list(t) for t in tensors]}
    fields.update(extra)
    return raw_map(fields)


# Where a deep value can sit in a request header, as request_header() keywords.
NESTED_FIELDS = {
    "id": lambda deep: {"req_id": deep},
    "op": lambda deep: {"op": deep},
    "version": lambda deep: {"version": deep},
    "tensor spec": lambda deep: {"tensors": Raw(b"\x91" + deep.data)},
    "tensor dtype": lambda deep: {"tensors": Raw(b"\x91\x92" + deep.data + b"\x91\x04")},
    "tensor shape": lambda deep: {"tensors": Raw(b"\x91\x92" + msgpack.packb("uint8")
                                                 + deep.data)},
    "args": lambda deep: {"args": raw_args(deep)},
    "extra field": lambda deep: {"junk": deep},
}


def raw_args(value: Raw) -> Raw:
    """``{"x": value}`` as a raw map."""
    return Raw(raw_map({"x": value}))


def nested_request(field: str, deep: Raw, req_id: int = 7, op: str = "echo",
                   args: Any = None, tensors: Any = ()) -> list[bytes]:
    """The frames of a request whose header has ``field`` (a key of
    :data:`NESTED_FIELDS`) replaced by ``deep``, the other fields as given.
    A hostile tensor spec comes with one tensor frame, so that the frame
    count matches and the spec itself is what gets looked at."""
    fields: dict[str, Any] = {"req_id": req_id, "op": op, "args": args, "tensors": tensors}
    fields.update(NESTED_FIELDS[field](deep))
    frames = [request_header(**fields)]
    if field.startswith("tensor"):
        frames.append(b"\0" * 4)
    return frames
