"""The link-delay proxy forwards real ZeroMQ traffic intact, per client, with its delay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import zmq

from pyg_dist_bench.link_proxy import DelayProxy


@pytest.fixture
def echo_server():
    """A ROUTER on loopback that echoes every message back to its sender."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:0")
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    stop = threading.Event()

    def serve():
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        while not stop.is_set():
            if poller.poll(50):
                sock.send_multipart(sock.recv_multipart())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def _dealer(endpoint: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    return sock


def test_forwards_multipart_messages_to_the_right_client(echo_server):
    with DelayProxy(echo_server, delay_ms=0) as proxy:
        a, b = _dealer(proxy.endpoint), _dealer(proxy.endpoint)
        try:
            payload = os.urandom(1 << 20)
            for i in range(20):
                a.send_multipart([b"a", str(i).encode(), payload])
                b.send_multipart([b"b", str(i).encode()])
            for i in range(20):
                assert a.recv_multipart() == [b"a", str(i).encode(), payload]
                assert b.recv_multipart() == [b"b", str(i).encode()]
        finally:
            a.close()
            b.close()


def test_round_trip_costs_at_least_twice_the_delay(echo_server):
    with DelayProxy(echo_server, delay_ms=40) as proxy:
        sock = _dealer(proxy.endpoint)
        try:
            start = time.perf_counter()
            sock.send(b"ping")
            assert sock.recv() == b"ping"
            assert time.perf_counter() - start >= 0.080
        finally:
            sock.close()


def test_runs_as_a_process_and_stops_on_sigterm(echo_server):
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyg_dist_bench.link_proxy", "--delay-ms", "1", echo_server],
        stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line[0] == "ready" and len(line) == 2
        sock = _dealer(line[1])
        try:
            sock.send(b"hello")
            assert sock.recv() == b"hello"
        finally:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
