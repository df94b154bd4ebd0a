"""The header decoder against values built to hurt it: nested a thousand
levels deep, megabytes of empty containers, oversized headers. Each is
refused with a ProtocolError whose message is short, in bounded memory
(measured with tracemalloc, which sees msgpack's allocations), and nothing
raises RecursionError."""

from __future__ import annotations

import time
import tracemalloc

import msgpack
import pytest
from support.hostile import (
    NESTED_FIELDS,
    Raw,
    empty_maps,
    nested,
    nested_request,
    raw_args,
    raw_map,
    request_header,
)

from pyg_dist.errors import ProtocolError
from pyg_dist.rpc import wire_format, wire_values

VERSION = wire_format.PROTOCOL_VERSION

# Deep enough that repr() of the value raises RecursionError (the limit is
# 1000), shallow enough that msgpack decodes it (its stack holds 1024).
DEEP = 1015
MAX_MESSAGE = 1 << 30


def _peak_of(fn, *args):
    """Runs ``fn(*args)``; returns (its result or exception, peak bytes
    allocated meanwhile, seconds)."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        try:
            out = fn(*args)
        except Exception as exc:  # the caller asserts on it
            out = exc
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out, peak, seconds


def _assert_short(exc: BaseException) -> None:
    message = str(exc)
    assert len(message) < 300, message
    assert "[[[" not in message


@pytest.mark.parametrize("field", list(NESTED_FIELDS))
def test_a_deeply_nested_request_field_is_refused_not_a_recursion_error(field):
    frames = nested_request(field, nested(DEEP))
    if field == "extra field":  # never looked at: the request is served as is
        assert wire_format.decode_request(frames, MAX_MESSAGE).id == 7
        return
    with pytest.raises(ProtocolError) as info:
        wire_format.decode_request(frames, MAX_MESSAGE)
    _assert_short(info.value)


@pytest.mark.parametrize("field", ["id", "status", "error", "result"])
def test_a_deeply_nested_reply_field_is_refused_not_a_recursion_error(field):
    fields = {"version": VERSION, "id": 3, "status": "ok", "result": {}, "tensors": []}
    if field == "error":
        fields["status"] = "error"
    fields[field] = nested(DEEP)
    with pytest.raises(ProtocolError) as info:
        wire_format.decode_reply([raw_map(fields)])
    _assert_short(info.value)


def test_a_result_nested_just_within_the_limit_is_accepted():
    deep = {"a": 1}  # {"r": deep}: the 1 lies 16 levels down
    for _ in range(wire_format.MAX_RESULT_DEPTH - 2):
        deep = [deep]
    frames = wire_format.encode_reply(1, {"r": deep}, [])
    assert wire_format.decode_reply([bytes(f) for f in frames])[1].result == {"r": deep}
    with pytest.raises(ProtocolError, match="nests deeper than 16"):
        wire_format.decode_reply([bytes(wire_format.encode_reply(1, {"r": [deep]}, [])[0])])


def test_nesting_beyond_msgpacks_stack_is_refused():
    frames = [request_header(1, args=raw_args(nested(5000)))]
    with pytest.raises(ProtocolError, match="nests deeper than msgpack's limit"):
        wire_format.decode_request(frames, MAX_MESSAGE)


def _fill(unit: bytes, header_bytes: int) -> Raw:
    """An array of as many ``unit`` values as fit in ``header_bytes``."""
    count = (header_bytes - 64) // len(unit)
    return Raw(b"\xdd" + count.to_bytes(4, "big") + unit * count)


# Headers of nearly 1 MiB (the size limit) built to cost the most once
# decoded: the refusal must come before they are built.
MEGABYTE_ATTACKS = {
    "maximal nesting": lambda: Raw(b"\x91" * ((1 << 20) - 64) + b"\x01"),
    "100k empty maps": lambda: empty_maps(100_000),
    # 256 arrays of 4,000 empty maps: each container within the length limit.
    "1M empty maps in 256 arrays": lambda: Raw(b"\xdc\x01\x00"
                                               + (b"\xdc\x0f\xa0" + b"\x80" * 4000) * 256),
    "repeated 1000-deep nests": lambda: _fill(nested(1000).data, 1 << 20),
}


@pytest.mark.parametrize("attack", list(MEGABYTE_ATTACKS))
def test_a_megabyte_header_is_refused_in_bounded_memory(attack):
    frames = [request_header(9, args=raw_args(MEGABYTE_ATTACKS[attack]()))]
    assert len(frames[0]) <= wire_format.MAX_HEADER_BYTES
    out, peak, seconds = _peak_of(wire_format.decode_request, frames, MAX_MESSAGE)
    print(f"\n{attack}: {len(frames[0])} byte header refused in {seconds * 1e3:.2f} ms, "
          f"peak {peak / 2**20:.2f} MiB allocated")
    assert isinstance(out, ProtocolError), out
    _assert_short(out)
    # Decoded whole, each of these is 56-64 MiB of Python objects.
    assert peak < 4 << 20
    assert wire_format.peek_id(frames) == 9


def test_a_40_mib_header_of_empty_maps_is_refused_unread():
    frames = [raw_map({"version": VERSION, "id": 11, "op": "get", "args": empty_maps(40 << 20)})]
    out, peak, seconds = _peak_of(wire_format.decode_request, frames, MAX_MESSAGE)
    assert isinstance(out, ProtocolError) and "exceeds the limit" in str(out)
    req_id, peek_peak, peek_seconds = _peak_of(wire_format.peek_id, frames)
    print(f"\n40 MiB header: refused in {seconds * 1e3:.2f} ms (peak {peak} bytes), "
          f"id read in {peek_seconds * 1e3:.2f} ms (peak {peek_peak} bytes)")
    assert req_id == 11
    # The old peek_id decoded it whole: 40M dicts, over 3 GiB.
    assert peak < 1 << 20 and peek_peak < 1 << 20


def test_a_header_just_over_the_limit_is_refused_and_its_id_still_read():
    pad = "x" * (wire_format.MAX_HEADER_BYTES - 40)
    frames = [request_header(12, "echo", {"pad": pad})]
    assert wire_format.MAX_HEADER_BYTES < len(frames[0]) < wire_format.MAX_HEADER_BYTES + 64
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        wire_format.decode_request(frames, MAX_MESSAGE)
    assert wire_format.peek_id(frames) == 12


def test_a_small_header_cannot_exceed_the_limits_it_is_not_checked_against():
    # Each value takes at least a byte: a header of SMALL_HEADER_BYTES holds
    # no more values than any limit allows, so it skips the checks.
    assert wire_values.SMALL_HEADER_BYTES <= min(
        wire_values.MAX_CONTAINERS, wire_values.MAX_CONTAINER_LEN, wire_values.MAX_ITEMS)


def test_a_big_header_within_the_limits_is_decoded_and_one_over_them_refused():
    # Over SMALL_HEADER_BYTES, so the counting hook runs, but legal.
    half = (wire_values.MAX_CONTAINERS - 8) // 2
    args = {"names": [f"feature-{i}" for i in range(3000)],
            "a": [[i, i] for i in range(half)], "b": [[i, i] for i in range(half)]}
    frames = [bytes(f) for f in wire_format.encode_request(5, "echo", args, [])]
    assert len(frames[0]) > wire_values.SMALL_HEADER_BYTES
    assert wire_format.decode_request(frames, MAX_MESSAGE).args == args
    args["c"] = [[0]] * 16
    frames = [bytes(f) for f in wire_format.encode_request(5, "echo", args, [])]
    with pytest.raises(ProtocolError, match="more than 4096 arrays and maps"):
        wire_format.decode_request(frames, MAX_MESSAGE)


def test_a_header_of_too_many_items_is_refused_after_building_few():
    row = list(range(100)) * 40  # 4,000 one-byte ints
    args = {f"k{i}": row for i in range(wire_values.MAX_ITEMS // 4000 + 1)}  # just over
    frames = [bytes(f) for f in wire_format.encode_request(6, "echo", args, [])]
    out, peak, _ = _peak_of(wire_format.decode_request, frames, MAX_MESSAGE)
    assert isinstance(out, ProtocolError) and f"{wire_values.MAX_ITEMS} items" in str(out)
    assert peak < 2 << 20
    del args["k0"]
    frames = [bytes(f) for f in wire_format.encode_request(6, "echo", args, [])]
    assert wire_format.decode_request(frames, MAX_MESSAGE).args == args


def test_a_container_over_the_length_limit_is_refused_before_it_is_built():
    frames = [request_header(4, args={"ids": list(range(wire_values.MAX_CONTAINER_LEN + 1))})]
    with pytest.raises(ProtocolError, match="exceeds max_array_len"):
        wire_format.decode_request(frames, MAX_MESSAGE)


@pytest.mark.parametrize("frames, want", [
    ([msgpack.packb({"version": VERSION, "id": 42, "tensors": [["nope", [1]]]})], 42),
    ([msgpack.packb({"id": 42})], 42),
    ([msgpack.packb({"op": "x" * 100, "id": 43})], 43),
    ([msgpack.packb({"id": -3})], None),
    ([msgpack.packb({"id": True})], None),
    ([msgpack.packb({"id": 1 << 63})], None),
    ([msgpack.packb([1, 2])], None),
    ([b"\xc1 random"], None),
    ([b""], None),
    ([], None),
    # The id behind a nested value or beyond the first 4 KiB is not looked for.
    ([raw_map({"junk": nested(DEEP), "id": 44})], 44),
    ([raw_map({"junk": nested(5000), "id": 45})], None),
    ([raw_map({"pad": "x" * 5000, "id": 46})], None),
])
def test_peek_id_reads_a_readable_id_only(frames, want):
    assert wire_format.peek_id(frames) == want


@pytest.mark.parametrize("value, want", [
    (None, "None"), (True, "True"), (7, "7"), (-1.5, "-1.5"), ("get", "'get'"),
    ("x" * 65, "a string of 65 characters"), (b"\0" * 3, "3 bytes"),
    ([1, "a", None], "[1, 'a', None]"), ([[1]], "a list of 1 item"),
    (list(range(9)), "a list of 9 items"), (("a", "b"), "('a', 'b')"),
    ({"a": 1}, "a map of 1 entry"), ({}, "a map of 0 entries"), (1 << 70, "an int of 71 bits"),
    (msgpack.ExtType(1, b"z"), "a value of type ExtType"),
])
def test_describe_shows_short_scalars_and_sizes_the_rest(value, want):
    assert wire_values.describe(value) == want


def test_describe_is_bounded_for_any_depth_and_size():
    deep = msgpack.unpackb(nested(DEEP).data)
    with pytest.raises(RecursionError):
        repr(deep)
    assert wire_values.describe(deep) == "a list of 1 item"
    assert wire_values.describe(["y" * 10**6]) == "a list of 1 item"
    assert wire_values.describe(10 ** 5000) == "an int of 16610 bits"


def test_error_text_cuts_long_messages_and_survives_unprintable_ones():
    class Unprintable(Exception):
        def __str__(self):
            raise RecursionError("no")

    assert wire_values.error_text(ValueError("x" * 100), 10) == "xxxxxxxxxx... (90 more characters)"
    assert "cannot be formatted" in wire_values.error_text(Unprintable())
