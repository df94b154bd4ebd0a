"""A bare ZeroMQ DEALER for talking to servers frame by frame in tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import zmq

from pyg_dist.rpc import wire_format


class RawDealer:
    """One DEALER socket connected to ``endpoint``; sends frames verbatim.

    Args:
        endpoint: The server's ZeroMQ endpoint.
        timeout: Seconds :meth:`recv` waits before failing the test.
    """

    def __init__(self, endpoint: str, timeout: float = 10.0) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.rcvtimeo = int(timeout * 1000)
        self.sock.connect(endpoint)

    def send(self, frames: Sequence[Any]) -> None:
        """Sends ``frames`` as one multipart message, exactly as given."""
        self.sock.send_multipart(list(frames))

    def recv(self) -> tuple[dict[str, Any], list[bytes]]:
        """Returns the next reply's decoded header and its raw tensor frames.

        Raises:
            zmq.Again: if nothing arrives within the timeout.
        """
        frames = self.sock.recv_multipart()
        return msgpack.unpackb(frames[0], raw=False), frames[1:]

    def request(self, frames: Sequence[Any]) -> tuple[dict[str, Any], list[bytes]]:
        """Sends ``frames`` and returns the reply (see :meth:`recv`)."""
        self.send(frames)
        return self.recv()

    def call(self, req_id: int, op: str, args: dict | None = None, tensors: Sequence = (),
             shm: Any = None) -> wire_format.Reply | wire_format.ErrorReply:
        """Sends a well-formed request (``shm``: its header field naming a
        lent segment) and returns the decoded reply content."""
        self.send(wire_format.encode_request(req_id, op, args, tensors, shm))
        frames = self.sock.recv_multipart()
        got_id, content = wire_format.decode_reply(frames)
        if got_id != req_id:
            raise AssertionError(f"reply id {got_id} answers another request than {req_id}")
        return content

    def close(self) -> None:
        """Closes the socket and its context."""
        self.sock.close()
        self.ctx.term()

    def __enter__(self) -> RawDealer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def header(req_id: int, op: str, args: dict | None = None,
           tensors: Sequence[Sequence[Any]] = ()) -> bytes:
    """A hand-made request header; ``tensors`` are ``[dtype, shape]`` specs."""
    return msgpack.packb({"version": wire_format.PROTOCOL_VERSION, "id": req_id, "op": op,
                          "args": args or {}, "tensors": [list(t) for t in tensors]})


def gets_answered(dealer: RawDealer) -> int:
    """How many ``get`` requests the partition server behind ``dealer`` has
    answered so far: served (``stats``' ``get_calls``) or refused for its
    reply budgets (``replies_refused`` of ``ping``'s ``usage``; refusals of
    other operations count too). A test waits for it to grow by the gets it
    sent instead of sleeping until they are probably done."""
    stats = dealer.call(0, "stats")
    usage = dealer.call(0, "ping", {"usage": True})
    if isinstance(stats, wire_format.ErrorReply) or isinstance(usage, wire_format.ErrorReply):
        raise AssertionError(f"the server refused stats or ping: {stats} {usage}")
    return stats.result["get_calls"] + usage.result["usage"]["replies_refused"]
