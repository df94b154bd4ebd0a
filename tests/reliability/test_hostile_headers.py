"""Headers built to hurt the decoder, against a real ``pyg-dist serve``.

A ~1 KB request whose id (or op, version, a tensor spec) nests 1,015 levels
deep used to kill the server's I/O thread (``repr`` in the error message
raised RecursionError) and the process exited with status 0; over 16 KiB
the same request killed a worker per request until ``edge_index`` and every
other request routed to workers went unanswered. A 40 MiB header of empty
maps was decoded whole to find its id (+3.2 GiB, a 3.4 s stall for every
client). Now each gets an error reply, the server's peak RSS stays within a
bound, and valid requests afterwards are answered correctly. Figures are
printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import sys
import threading
import time

import psutil
import pytest
import torch
from reliability_checks import LIMIT
from support.hostile import (
    NESTED_FIELDS,
    Raw,
    empty_maps,
    nested,
    nested_request,
    raw_map,
    request_header,
)
from support.rawzmq import RawDealer
from support.servers import serve_part

from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.rpc.wire_format import PROTOCOL_VERSION

DEEP = 1015
WORKERS = 2  # of the shared part0_server
WORKER_PAD = "p" * (20 << 10)  # over the 16 KiB served inline


def _check_serves_correctly(endpoint: str, data, part) -> None:
    """``get``, ``sample`` and ``edge_index`` (always a worker's) answer
    exactly what the graph holds."""
    ids = part.node_ids[[0, 5, 3, 5]]
    with RpcClient([endpoint], RpcConfig(timeout=30)) as client:
        reply = client.call(0, "get", {"groups": [{"attrs": ["x", "y"]}]}, [ids])
        assert torch.equal(reply.tensors[0], data.x[ids])
        assert torch.equal(reply.tensors[1], data.y[ids])
        counts, nbrs, eids = client.call(0, "sample", {"edge_types": [None], "num_neighbors": -1},
                                         [ids]).tensors
        assert torch.equal(data.edge_index[1, eids], ids.repeat_interleave(counts))
        assert torch.equal(data.edge_index[0, eids], nbrs)
        row, col, eids = client.call(0, "edge_index").tensors
        assert torch.equal(eids, part.edge_ids)
        assert torch.equal(data.edge_index[0, eids], row)
        assert torch.equal(data.edge_index[1, eids], col)


@pytest.mark.parametrize("path", ["inline", "worker"])
def test_nested_headers_leave_the_server_serving(part0_server, part0, cora_data, path):
    proc, endpoint = part0_server
    pad = {"pad": WORKER_PAD} if path == "worker" else {}
    sent = 0
    with RawDealer(endpoint, timeout=10) as dealer:
        for field in NESTED_FIELDS:
            if field in ("args", "extra field"):
                continue
            frames = nested_request(field, nested(DEEP), 7, "get", pad)
            assert len(frames[0]) < LIMIT
            for _ in range(WORKERS + 1):  # more than the workers
                head, tensors = dealer.request(frames)
                sent += 1
                assert head["status"] == "error", head
                assert head["error"]["type"] == "ProtocolError"
                assert len(head["error"]["message"]) < 300
    print(f"\n{sent} nested headers ({path}) refused, server still up")
    assert proc.poll() is None
    _check_serves_correctly(endpoint, cora_data, part0)


def _reset_peak_rss(pid: int) -> int:
    """Resets the peak RSS (VmHWM) of ``pid`` to its current RSS; returns it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS is read from /proc")
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("this kernel does not let us reset the server's peak RSS")
    return _peak_rss(pid)


def _peak_rss(pid: int) -> int:
    """Peak RSS (VmHWM) of ``pid`` in bytes since the last reset."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    pytest.skip("no VmHWM in /proc/<pid>/status")


@pytest.fixture(scope="module")
def roomy_server(cora2_root):
    """A server with the default 1 GiB request limit: libzmq's MAXMSGSIZE
    (twice that) lets a 40 MiB header through to the decoder."""
    with serve_part(cora2_root, 0, serve_args=["--workers", "2"]) as (proc, endpoint):
        yield proc, endpoint


# name -> the request's id, its header frame
ATTACKS = {
    "40 MiB header of empty maps": lambda: (51, raw_map(
        {"version": PROTOCOL_VERSION, "id": 51, "op": "get", "args": Raw(raw_map(
            {"x": empty_maps(40 << 20)}))})),
    "header just over 1 MiB": lambda: (52, request_header(52, "get", {"pad": "x" * (1 << 20)})),
    "100k empty maps in 25 arrays": lambda: (53, request_header(53, "get", Raw(raw_map(
        {"x": Raw(b"\xdc\x00\x19" + (b"\xdc\x0f\xa0" + b"\x80" * 4000) * 25)})))),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_huge_headers_are_refused_fast_in_bounded_memory(roomy_server, part0, cora_data,
                                                         attack):
    proc, endpoint = roomy_server
    req_id, head_frame = ATTACKS[attack]()
    frames = [head_frame]
    _check_serves_correctly(endpoint, cora_data, part0)  # warm
    rss_before = psutil.Process(proc.pid).memory_info().rss
    peak_before = _reset_peak_rss(proc.pid)
    stalls = []
    stop = threading.Event()

    def bystander() -> None:  # another client's small calls meanwhile
        ids = part0.node_ids[:4]
        with RpcClient([endpoint], RpcConfig(timeout=30)) as client:
            while not stop.is_set():
                start = time.perf_counter()
                client.call(0, "get", {"groups": [{"attrs": ["y"]}]}, [ids])
                stalls.append(time.perf_counter() - start)

    thread = threading.Thread(target=bystander, daemon=True)
    thread.start()
    try:
        with RawDealer(endpoint, timeout=30) as dealer:
            start = time.perf_counter()
            head, _ = dealer.request(frames)
            seconds = time.perf_counter() - start
    finally:
        stop.set()
        thread.join(60)
    grown = _peak_rss(proc.pid) - peak_before
    print(f"\n{attack}: {len(frames[0]) / 2**20:.2f} MiB header refused in "
          f"{seconds * 1e3:.1f} ms (sent and answered); server RSS "
          f"{rss_before / 2**20:.0f} MiB before, peak grew by {grown / 2**20:.1f} MiB; "
          f"slowest bystander call {max(stalls, default=0) * 1e3:.1f} ms of {len(stalls)}")
    assert not thread.is_alive()
    assert head["status"] == "error" and head["error"]["type"] == "ProtocolError"
    assert head["id"] == req_id
    # libzmq holds the frame while it is decoded (40 MiB); decoding it whole
    # took 3.2 GiB.
    assert grown < 2 * len(frames[0]) + (64 << 20)
    assert proc.poll() is None
    _check_serves_correctly(endpoint, cora_data, part0)
