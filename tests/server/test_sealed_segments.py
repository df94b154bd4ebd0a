"""A client cannot truncate a segment under a server writing into it.

A truncated mapping kills the process that touches it with SIGBUS, which no
Python code can catch: with segments as files in /dev/shm, a hostile client
of the server's user that kept the descriptor could stop any same-host
server this way. Segments are now memfd sealed against shrinking and
growing (``F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL``), and the server maps
nothing else (``test_shared_memory_get.py::test_only_memory_sealed_...``).
Against a real ``pyg-dist serve`` process on this host.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading

import pytest
import torch
from support.rawzmq import RawDealer
from support.shm_files import needs_shm

from pyg_dist.rpc import shm as shared_memory
from pyg_dist.rpc.shm import Segment
from pyg_dist.rpc.wire_format import ErrorReply

pytestmark = needs_shm

ROWS = 600  # of 1433 float32 features: 3.4 MB written into the segment per request
ROUNDS = 30


@pytest.fixture(scope="module")
def part0(cora_reader):
    return cora_reader.load_part(0)


def _truncate_until(stop: threading.Event, fd: int, outcomes: list[int]) -> None:
    """What a hostile client does with the descriptor it kept: truncate,
    grow, and try to lift the seals, over and over."""
    attempts = (lambda: os.ftruncate(fd, 0), lambda: os.ftruncate(fd, 1 << 30),
                lambda: os.truncate(f"/proc/self/fd/{fd}", 4096),
                lambda: fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0))
    while not stop.is_set():
        for attempt in attempts:
            try:
                attempt()
                outcomes.append(0)
            except OSError as exc:
                outcomes.append(exc.errno)


def test_a_client_truncating_its_segment_does_not_stop_the_server(cora_cluster, part0):
    server = cora_cluster.processes[0]
    seg = Segment(4 << 20)
    kept = os.dup(seg.fd)  # the hostile client keeps it after the server mapped it
    stop, outcomes = threading.Event(), []
    hostile = threading.Thread(target=_truncate_until, args=(stop, kept, outcomes))
    local = torch.arange(ROWS)
    ids = part0.node_ids[local]
    try:
        with RawDealer(cora_cluster.endpoints[0], timeout=60.0) as dealer:
            hostile.start()
            first = dealer.call(1, "get", {"groups": [{"attrs": ["x"]}]}, [ids], shm=seg.spec())
            assert not isinstance(first, ErrorReply), first
            seg.announce()  # the client's own descriptor goes; `kept` stays
            for req_id in range(2, 2 + ROUNDS):  # pipelined: the server keeps writing
                dealer.send(_request(req_id, ids, seg))
            for _ in range(ROUNDS):
                header, _ = dealer.recv()
                assert header.get("status") == "ok", header
            stop.set()
            hostile.join(timeout=30)
            assert outcomes and set(outcomes) == {errno.EPERM}  # every attempt refused
            assert os.fstat(kept).st_size == shared_memory.HEADER_BYTES + seg.size
            (offset,) = [o for _, _, o in first.shm]
            x = shared_memory.view(seg.payload, offset, torch.float32, (ROWS, 1433))
            assert torch.equal(x, part0.node_features["x"][local])
            assert server.poll() is None  # alive, and serving
            plain = dealer.call(99, "get", {"groups": [{"attrs": ["y"]}]}, [ids[:5]])
            assert torch.equal(plain.tensors[0], part0.node_features["y"][local[:5]])
            assert dealer.call(100, "release", {"segments": [seg.key]}).result["released"] == 1
    finally:
        stop.set()
        if hostile.is_alive():
            hostile.join(timeout=30)
        os.close(kept)
        seg.close()


def _request(req_id: int, ids: torch.Tensor, seg: Segment) -> list:
    from pyg_dist.rpc import wire_format

    return wire_format.encode_request(req_id, "get", {"groups": [{"attrs": ["x"]}]}, [ids],
                                      seg.spec())
