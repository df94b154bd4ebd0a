"""A tiny handler table for testing the generic RPC layer on real sockets."""

from __future__ import annotations

import threading

import torch


def echo(args, tensors):
    return {"args": args}, tensors


def add(args, tensors):
    return {"k": args["k"]}, [tensors[0] + args["k"]]


def boom(args, tensors):
    raise ValueError(args.get("msg", "boom"))


def crash(args, tensors):
    raise RuntimeError("handler bug")


SLOW_RUNNING = threading.Event()
"""Set while a ``slow`` handler runs (in-process servers): a test waits on
it to know a handler is inside its call, instead of sleeping and hoping."""


def slow(args, tensors):
    SLOW_RUNNING.set()
    try:
        # Bounded so a stuck test cannot keep a worker forever.
        threading.Event().wait(min(float(args.get("s", 1.0)), 5.0))
    finally:
        SLOW_RUNNING.clear()
    return {"slept": args.get("s")}, []


def whoami_factory(name):
    def whoami(args, tensors):
        return {"name": name}, [torch.tensor([len(name)])]
    return whoami


HANDLERS = {"echo": echo, "add": add, "boom": boom, "crash": crash, "slow": slow}
