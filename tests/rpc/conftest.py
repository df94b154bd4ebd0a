"""A real RpcServer on loopback with a tiny handler table."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from pyg_dist.rpc import RpcConfig, RpcServer


def echo(args, tensors):
    return {"args": args}, tensors


def add(args, tensors):
    return {"k": args["k"]}, [tensors[0] + args["k"]]


def boom(args, tensors):
    raise ValueError(args.get("msg", "boom"))


def crash(args, tensors):
    raise RuntimeError("handler bug")


def slow(args, tensors):
    # Bounded so a stuck test cannot keep a worker forever.
    threading.Event().wait(min(float(args.get("s", 1.0)), 5.0))
    return {"slept": args.get("s")}, []


def whoami_factory(name):
    def whoami(args, tensors):
        return {"name": name}, [torch.tensor([len(name)])]
    return whoami


HANDLERS = {"echo": echo, "add": add, "boom": boom, "crash": crash, "slow": slow}


@pytest.fixture
def server():
    config = RpcConfig(workers=4, max_message_bytes=64 << 20, timeout=10.0)
    srv = RpcServer(HANDLERS, "tcp://127.0.0.1:0", config, name="test-server")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def wait_until(predicate, timeout=10.0):
    """Polls ``predicate`` until true or ``timeout``; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
