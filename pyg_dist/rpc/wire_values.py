"""Reading untrusted msgpack headers in bounded time and memory, and
describing what they hold without ``repr``.

A header off the wire may be built to hurt whoever reads it:

* nested a thousand levels deep: msgpack decodes up to 1,024 levels, and
  ``repr`` of such a value (in an error message) raises ``RecursionError``;
* a megabyte of empty maps or arrays: one byte on the wire each, a Python
  object of 56-64 bytes each once decoded (a 40 MiB header of them took
  3.2 GiB and 3.4 s to decode);
* a megabyte of scalars: a million Python objects, 0.1-0.3 s of msgpack's C
  code holding the GIL (every thread of the server stalls meanwhile);
* one string or list of a megabyte, quoted whole in an error message.

So a header is refused unread above :data:`MAX_HEADER_BYTES`. One of more
than :data:`SMALL_HEADER_BYTES` is decoded with msgpack's own limits, which
refuse any one array or map of over :data:`MAX_CONTAINER_LEN` items before
it is built, and with a hook, run as each container is completed, that stops
the decoding after :data:`MAX_CONTAINERS` containers or
:data:`MAX_ITEMS` items in all: at most about that much is ever built, in a
few milliseconds. A smaller header goes without either: it cannot exceed any
of these limits (each value takes at least a byte), and the options cost
1-3 us, a visible share of a small call. Nesting deeper than msgpack's stack
(1,024 levels) fails inside msgpack's C code, not ours. Bulk data belongs in
tensor frames, not in a header.
Which field may nest how deep is the protocol's business
(:mod:`pyg_dist.rpc.wire_format`); nothing here recurses over a value.

Values are described by :func:`describe`: short scalars as themselves, a
few short scalars in a flat list as that list, anything else by its type and
size. Messages built from it are bounded and cannot raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import msgpack

from pyg_dist.errors import ProtocolError

MAX_HEADER_BYTES = 1 << 20
"""Largest header frame decoded at all."""

MAX_CONTAINER_LEN = 4096
"""Most items of one array, or entries of one map, in a header."""

MAX_CONTAINERS = 4096
"""Most arrays and maps in one header (all levels together)."""

MAX_ITEMS = 1 << 14
"""Most items and entries of all arrays and maps of one header together
(decoding that many strings took up to 10 ms on 2 busy cores)."""

SMALL_HEADER_BYTES = 4096
"""Headers up to this size are decoded without limits or hooks: they cannot
hold more containers, items or entries than allowed anyway."""

MAX_ID = (1 << 63) - 1

# How much of a header peek_id() reads when looking for the id of a message
# that failed to decode: our encoders put the id in the first 30 bytes.
PEEK_BYTES = 4096
# Longest string quoted in a description; longer ones are described by size.
_QUOTE_CHARS = 64
# Most items of a flat list shown in a description.
_SHOW_ITEMS = 8

_LIMITS: dict[str, Any] = {
    "raw": False,
    "strict_map_key": True,
    "use_list": True,
    "max_str_len": MAX_HEADER_BYTES,
    "max_bin_len": MAX_HEADER_BYTES,
    "max_array_len": MAX_CONTAINER_LEN,
    "max_map_len": MAX_CONTAINER_LEN,
    # Ext values are refused by the protocol anyway; a timestamp is 12 bytes.
    "max_ext_len": 16,
}


class _TooManyContainers(Exception):
    """Raised by the counting hook to abort msgpack's decoding."""


def unpack_header(raw: memoryview, tensors: int = 0) -> Any:
    """Decodes one header frame within the limits above.

    Args:
        raw: The frame's bytes.
        tensors: Tensor specs the header may carry beyond the fixed limits
            (a reply whose request asked for thousands of tensors: 3 per
            edge type of a ``sample``): each may add two containers
            (``[dtype, [shape...]]``), four items, and one entry to the list
            of specs. Derived from the caller's own request, never from the
            header.

    Returns:
        The decoded value (any msgpack type; the caller checks its shape and
        must not recurse into it unbounded: it may nest 1,024 levels).

    Raises:
        ProtocolError: if the frame is too big, not msgpack, nests deeper
            than msgpack's stack, or holds too many or too long containers.
    """
    size = len(raw)
    if size > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {size} bytes exceeds the limit of {MAX_HEADER_BYTES}")
    try:
        if size <= SMALL_HEADER_BYTES:  # the common case: keep it a plain call
            return msgpack.unpackb(raw, raw=False, strict_map_key=True, use_list=True)
        hook = _counting_hook(MAX_CONTAINERS + 2 * tensors, MAX_ITEMS + 4 * tensors)
        limits = _LIMITS if not tensors else \
            {**_LIMITS, "max_array_len": MAX_CONTAINER_LEN + tensors}
        return msgpack.unpackb(raw, list_hook=hook, object_hook=hook, **limits)
    except _TooManyContainers:
        raise ProtocolError(f"header holds more than {MAX_CONTAINERS + 2 * tensors} arrays "
                            f"and maps or {MAX_ITEMS + 4 * tensors} items in them; send bulk "
                            f"data as tensors") from None
    except msgpack.StackError:
        raise ProtocolError("header nests deeper than msgpack's limit of 1024 levels") \
            from None
    except Exception as exc:  # msgpack raises several unrelated types.
        raise ProtocolError(f"header is not valid msgpack: {type(exc).__name__}: "
                            f"{error_text(exc, 200)}") from None


def _counting_hook(containers: int, items: int) -> Callable[[Any], Any]:
    """A msgpack list/object hook that aborts the decoding (raising
    :class:`_TooManyContainers`) once more than ``containers`` containers
    or ``items`` items in them were built; it runs as each container is
    completed, so no more than that (plus one container of at most the
    length limit) is ever built."""

    def count(container: Any) -> Any:
        nonlocal containers, items
        containers -= 1
        items -= len(container)
        if containers < 0 or items < 0:
            raise _TooManyContainers
        return container

    return count


def peek_id(raw: memoryview) -> Optional[int]:
    """The request id of a header that failed to decode, if one can be read
    cheaply: only the first :data:`PEEK_BYTES` are looked at, the header's
    map is walked key by key until ``id``, and other values are skipped, not
    built. ``None`` when there is no readable id there.

    Args:
        raw: The header frame's bytes.

    Returns:
        The id, an int in ``[0, 2**63)``, or ``None``. Never raises.
    """
    unpacker = msgpack.Unpacker(max_buffer_size=PEEK_BYTES, **_LIMITS)
    try:
        unpacker.feed(raw[:PEEK_BYTES])
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if type(key) is str and key == "id":
                value = unpacker.unpack()
                return value if type(value) is int and 0 <= value <= MAX_ID else None
            unpacker.skip()
    except Exception:  # garbage, or the id lies beyond the prefix: no id to echo
        return None
    return None


def describe(value: Any) -> str:
    """A short description of a value that came off the wire.

    ``None``, bools, numbers and strings of up to 64 characters are shown as
    themselves (``repr``, which cannot recurse on them); a list of at most 8
    such scalars as that list; anything else as its type and size, e.g. "a
    list of 1 item", "a map of 3 entries", "a string of 70000 characters".
    Never looks inside a nested container, so it is bounded for any input.

    Args:
        value: The value to describe.

    Returns:
        A string of a few KiB at most (escapes included).
    """
    kind = type(value)
    if _is_short_scalar(value):
        return repr(value)
    if kind is str:
        return f"a string of {len(value)} characters"
    if kind is int:  # over 2**64 only from a local caller; str() of it may refuse
        return f"an int of {value.bit_length()} bits"
    if kind in (bytes, bytearray):
        return f"{len(value)} bytes"
    if kind in (list, tuple):
        if len(value) <= _SHOW_ITEMS and all(_is_short_scalar(v) for v in value):
            return repr(value)  # a few short scalars: bounded, flat
        return f"a {kind.__name__} of {_count(len(value), 'item')}"
    if kind is dict:
        return f"a map of {_count(len(value), 'entry', 'entries')}"
    return f"a value of type {kind.__name__}"


def error_text(exc: BaseException, limit: int = 16384) -> str:
    """``str(exc)``, cut to ``limit`` characters, never raising: an error
    built from a wire value may not even format.

    Args:
        exc: The exception.
        limit: Longest text returned; a longer one is cut and says so.

    Returns:
        The message, or a note naming the exception's type if it has none
        that can be formatted.
    """
    try:
        text = str(exc)
    except Exception:  # any failure here means "no message"
        return f"({type(exc).__name__} whose message cannot be formatted)"
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return text


def _is_short_scalar(value: Any) -> bool:
    kind = type(value)
    if value is None or kind in (bool, float):
        return True
    if kind is int:
        return -(1 << 64) < value < (1 << 64)
    return kind is str and len(value) <= _QUOTE_CHARS


def _count(n: int, singular: str, plural: Optional[str] = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"
