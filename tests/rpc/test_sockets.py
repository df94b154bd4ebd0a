"""send_frames: one multipart message, frame boundaries kept, never blocks."""

from __future__ import annotations

import pytest
import torch
import zmq

from pyg_dist.rpc.sockets import send_frames


@pytest.fixture
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.linger = b.linger = 0
    port = b.bind_to_random_port("tcp://127.0.0.1")
    a.connect(f"tcp://127.0.0.1:{port}")
    yield a, b
    a.close()
    b.close()
    ctx.term()


def test_frames_arrive_as_one_message_with_their_boundaries(pair):
    a, b = pair
    tensor = torch.arange(1000, dtype=torch.int64)
    frames = [b"header", memoryview(tensor.numpy()).cast("B"), b"", zmq.Frame(b"last")]
    send_frames(a, frames)
    send_frames(a, [b"second message"])
    b.rcvtimeo = 10_000
    got = b.recv_multipart()
    assert got == [b"header", tensor.numpy().tobytes(), b"", b"last"]
    assert b.recv_multipart() == [b"second message"]


def test_a_socket_that_cannot_take_the_message_raises_again_at_once():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)  # no peer: nothing can be queued
    sock.linger = 0
    try:
        with pytest.raises(zmq.Again):
            send_frames(sock, [b"a", b"b"])
    finally:
        sock.close()
        ctx.term()
