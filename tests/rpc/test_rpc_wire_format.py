"""The wire format: round trips for every allowed dtype, refusal of bad input."""

from __future__ import annotations

import msgpack
import pytest
import torch

from pyg_dist.errors import ProtocolError
from pyg_dist.rpc import wire_format


def _payload(frames):
    # What arrives at the other side: plain bytes per frame.
    return [bytes(f) for f in frames]


@pytest.mark.parametrize("dtype", list(wire_format.DTYPES.values()))
def test_every_allowed_dtype_round_trips(dtype):
    source = (torch.arange(24) % 7).to(dtype).reshape(2, 3, 4)
    frames = wire_format.encode_request(7, "echo", {"k": [1, "a", None]}, [source])
    request = wire_format.decode_request(_payload(frames), max_bytes=1 << 20)
    assert (request.id, request.op, request.args) == (7, "echo", {"k": [1, "a", None]})
    assert request.tensors[0].dtype == dtype
    assert torch.equal(request.tensors[0], source)


def test_empty_scalar_and_non_contiguous_tensors_round_trip():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sent = [torch.empty(0, 5), torch.tensor(3.5), base.t(), base[:, 1]]
    frames = wire_format.encode_reply(3, {"x": 1}, sent)
    req_id, reply = wire_format.decode_reply(_payload(frames))
    assert req_id == 3 and reply.result == {"x": 1}
    assert [t.shape for t in reply.tensors] == [t.shape for t in sent]
    for got, want in zip(reply.tensors, sent):
        assert torch.equal(got, want)


def test_error_reply_carries_type_and_message_intact():
    message = "ids [5, 9] are not owned by part 1 (ünïcode kept)"
    req_id, err = wire_format.decode_reply(wire_format.encode_error(4, "StoreError", message))
    assert req_id == 4
    assert isinstance(err, wire_format.ErrorReply)
    assert (err.type, err.message) == ("StoreError", message)


def test_complex_dtype_is_refused_when_sending():
    with pytest.raises(ProtocolError, match="cannot be sent"):
        wire_format.encode_request(1, "op", None, [torch.zeros(2, dtype=torch.complex64)])


def test_unencodable_args_are_refused_when_sending():
    with pytest.raises(ProtocolError, match="cannot be encoded"):
        wire_format.encode_request(1, "op", {"x": object()}, [])


def _header(**fields):
    head = {"version": wire_format.PROTOCOL_VERSION, "id": 1, "op": "echo", "args": {},
            "tensors": []}
    head.update(fields)
    return msgpack.packb(head)


@pytest.mark.parametrize("frames, match", [
    ([], "empty message"),
    ([b"\xc1\xff\x00garbage"], "not valid msgpack"),
    ([msgpack.packb([1, 2, 3])], "must be a map"),
    ([_header(version=99)], "unsupported protocol version"),
    ([_header(id=-1)], "request id"),
    ([_header(id="x")], "request id"),
    ([_header(op="")], "op must be"),
    ([_header(op=5)], "op must be"),
    ([_header(args=[1])], "args must be a map"),
    ([_header(tensors=[["float32", [2]]])], "declares 1 tensors but 0"),
    ([_header(tensors=[["object", [2]]]), b"\0" * 8], "not allowed"),
    ([_header(tensors=[["float32", [-2]]]), b""], "non-negative"),
    ([_header(tensors=[["float32", [3]]]), b"\0" * 8], "need 12 bytes but the frame holds 8"),
    ([_header(tensors=[["float32", [1] * 9]]), b"\0" * 4], "at most 8"),
    ([_header(tensors=[["float32"]]), b""], "spec must be"),
    ([_header(args={"x": msgpack.ExtType(1, b"zz")})], "not a plain msgpack value"),
])
def test_malformed_requests_are_refused(frames, match):
    with pytest.raises(ProtocolError, match=match):
        wire_format.decode_request(frames, max_bytes=1 << 20)


def test_truncated_header_is_refused():
    good = wire_format.encode_request(1, "echo", {"a": "b" * 40}, [])[0]
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        wire_format.decode_request([good[: len(good) // 2]], max_bytes=1 << 20)


def test_oversize_request_is_refused_before_decoding():
    frames = wire_format.encode_request(1, "echo", None, [torch.zeros(1000)])
    with pytest.raises(ProtocolError, match="exceeds this server's limit"):
        wire_format.decode_request(_payload(frames), max_bytes=1000)


def test_peek_id_recovers_the_id_of_a_bad_request_only_when_readable():
    assert wire_format.peek_id([_header(id=42, tensors=[["nope", [1]]])]) == 42
    assert wire_format.peek_id([b"\xc1 random"]) is None
    assert wire_format.peek_id([msgpack.packb({"id": -3})]) is None
