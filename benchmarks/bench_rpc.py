"""RPC throughput on loopback: pyg-dist's partition server against bare pyzmq.

Not a test: it prints figures. Run::

    .venv/bin/python benchmarks/bench_rpc.py            # full run, ~1-2 minutes
    .venv/bin/python benchmarks/bench_rpc.py --quick    # fewer rows / seconds

What is measured, each through a real server process on 127.0.0.1:

* feature fetch: ``get`` of ``x`` (128 float32 per row) for 1k, 10k and 100k
  random owned ids, in GB/s of returned feature bytes;
* small sampling calls: ``sample`` of 16 seeds with fan-out 10, requests/s;
* the RPC layer alone: ``ping`` (no tensors, a handler that does nothing), so
  the cost of the protocol, the server and the client shows apart from the
  cost of the ``sample`` handler;
* the transport ceiling: a bare pyzmq ROUTER in its own process answering
  the same request with a precomputed reply of the same byte size (no gather,
  no validation, no protocol), driven by a bare DEALER;
* the same-host path: ``get`` with the rows written into shared memory the
  client lends the server (``reply_bytes`` of ``RpcClient.call_async``,
  :mod:`pyg_dist.rpc.shm`; one segment per request in flight), against the
  same TCP ceiling. It only exists where
  client and server share a host.

Every figure is taken with ``--depth`` requests kept in flight by one client
thread (1 = pure round-trip latency), and the ratio pyg-dist / bare printed.
Beside each side's rate it prints the CPU time the client and server
processes together spent per request in that run (all their threads,
libzmq's included; Linux only). A side cannot answer faster than ``cores /
CPU per request``, so where both sides are CPU-bound the ratio of the two CPU
columns is the ceiling of the rate ratio on that machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Optional

import torch
import zmq
from torch_geometric.data import Data

import pyg_dist
from pyg_dist.cluster import LocalCluster
from pyg_dist.malloc_tuning import tune_malloc
from pyg_dist.rpc import RpcClient, RpcConfig
from pyg_dist.rpc.shm import host_id

FEATURES = 128


def bare_server(reply_bytes: list[int]) -> None:
    """Bare ROUTER: answers a request whose first frame is ``b"<i>"`` with the
    precomputed payload ``i`` (zero-copy), echoing the request id frame."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.linger = 0
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    payloads = [memoryview(bytearray(n)) for n in reply_bytes]
    print(f"ready tcp://127.0.0.1:{port}", flush=True)
    try:
        while True:
            identity, which, *_ = sock.recv_multipart(copy=False)
            sock.send_multipart([identity, which, payloads[int(which.bytes)]], copy=False)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        ctx.term()


def _pipelined(issue: Callable[[], object], wait: Callable[[object], None], depth: int,
               seconds: float) -> tuple[int, float]:
    """Keeps ``depth`` requests in flight for about ``seconds``; returns
    (completed requests, elapsed seconds)."""
    pending: collections.deque = collections.deque(issue() for _ in range(depth))
    done, start = 0, time.perf_counter()
    while True:
        wait(pending.popleft())
        done += 1
        if time.perf_counter() - start < seconds:
            pending.append(issue())
        elif not pending:
            return done, time.perf_counter() - start


def bench_bare(endpoint: str, which: int, request_bytes: int, depth: int,
               seconds: float) -> tuple[int, float]:
    """Requests/s against the bare server, one DEALER, ``depth`` in flight."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    body = memoryview(bytearray(request_bytes))
    tag = str(which).encode()
    try:
        def issue() -> None:
            sock.send_multipart([tag, body], copy=request_bytes < 65536)

        def wait(_: object) -> None:
            sock.recv_multipart(copy=False)

        _pipelined(issue, wait, depth, 0.3)  # warm-up
        return _pipelined(issue, wait, depth, seconds)
    finally:
        sock.close()
        ctx.term()


def bench_pyg(client: RpcClient, op: str, args: dict, ids: Optional[torch.Tensor],
              depth: int, seconds: float) -> tuple[int, float]:
    """Requests/s of ``op`` against the partition server."""
    tensors = [] if ids is None else [ids]

    def issue():
        return client.call_async(0, op, args, tensors)

    def wait(future) -> None:
        future.result(timeout=60)

    _pipelined(issue, wait, depth, 0.3)
    return _pipelined(issue, wait, depth, seconds)


def bench_pyg_shm(client: RpcClient, ids: torch.Tensor, reply_bytes: int, depth: int,
                  seconds: float) -> tuple[int, float]:
    """Requests/s of ``get`` into shared memory the client lends
    (``reply_bytes``: one segment per request in flight, from its pool)."""
    client.ping(0)  # the client learns that the server shares its host

    def issue():
        return client.call_async(0, "get", {"groups": [{"attrs": ["x"]}]}, [ids],
                                 reply_bytes=reply_bytes)

    def wait(future) -> None:
        reply = future.result(timeout=60)
        try:
            if reply.shm is None:
                raise RuntimeError("a reply travelled over the socket: raise the client's "
                                   "shared_memory_bytes or free memory")
        finally:
            reply.release()

    _pipelined(issue, wait, depth, 0.3)
    return _pipelined(issue, wait, depth, seconds)


def build_dataset(root: str, num_nodes: int) -> None:
    """A one-part random graph with 128 float32 features per node."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(num_nodes, FEATURES, generator=gen)
    edge_index = torch.randint(0, num_nodes, (2, num_nodes * 10), generator=gen)
    data = Data(x=x, y=torch.zeros(num_nodes, dtype=torch.long), edge_index=edge_index)
    pyg_dist.partition(data, 1, root, partitioner="random")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller and shorter run")
    parser.add_argument("--seconds", type=float, default=None, help="time per figure")
    parser.add_argument("--depth", type=int, nargs="+", default=[1, 8],
                        help="requests in flight (default: 1 8)")
    parser.add_argument("--workers", type=int, default=4, help="server worker threads")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating runs per figure; the best of each side counts")
    parser.add_argument("--no-shm", action="store_true",
                        help="skip the same-host shared memory rows")
    parser.add_argument("--bare-server", type=int, nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server is not None:
        bare_server(args.bare_server)
        return
    seconds = args.seconds or (0.5 if args.quick else 1.0)
    rows_list = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    num_nodes = max(rows_list) + 10_000
    torch.set_num_threads(1)
    # As every trainer gets it through pyg_dist.connect(); both sides' clients
    # live in this process, so the echo gains from it as much as pyg-dist.
    tune_malloc()

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "bench")
        build_dataset(root, num_nodes)
        sample_reply = 8 * (16 + 2 * 16 * 10)  # counts + neighbours + edge ids
        ping_reply = 64  # about the size of ping's msgpack header
        payloads = [rows * FEATURES * 4 for rows in rows_list] + [sample_reply, ping_reply]
        bare = subprocess.Popen([sys.executable, __file__, "--bare-server",
                                 *map(str, payloads)], stdout=subprocess.PIPE, text=True)
        try:
            bare_endpoint = bare.stdout.readline().split()[1]
            with LocalCluster(root, serve_args=["--workers", str(args.workers)]) as cluster, \
                    RpcClient(cluster.endpoints, RpcConfig(
                        timeout=60, shared_memory_bytes=_lent_bytes(rows_list, args.depth))
                    ) as client:
                run_all(client, bare_endpoint, rows_list, num_nodes, args.depth, seconds,
                        args.rounds, cluster.processes[0].pid, bare.pid,
                        shm=not args.no_shm and host_id() is not None)
        finally:
            bare.terminate()
            bare.wait(10)


def _lent_bytes(rows_list: list[int], depths: list[int]) -> int:
    """Room for one segment per request in flight of the biggest reply (each
    made a quarter bigger than its reply, rounded up to MiB)."""
    return max(depths) * (int(max(rows_list) * FEATURES * 4 * 1.25) + (2 << 20))


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system, every thread) the processes ``pids`` used so
    far; ``nan`` where ``/proc`` does not tell (not Linux)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                # Fields after the parenthesised command name; utime and
                # stime are fields 14 and 15 of the whole line.
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Side:
    """One side of a comparison: how to run it and which processes do its work
    (the client is this process)."""

    def __init__(self, run: Callable[[], tuple[int, float]], server_pid: int) -> None:
        self.run = run
        self.pids = [os.getpid(), server_pid]

    def measure(self) -> tuple[float, float]:
        """One run: (requests/s, CPU microseconds per request)."""
        before = cpu_seconds(self.pids)
        n, dt = self.run()
        return n / dt, (cpu_seconds(self.pids) - before) / n * 1e6


def _best_of(rounds: int, ours: Side, bare: Side) -> tuple[tuple[float, float], ...]:
    """Best (requests/s, CPU us per request) of each side over ``rounds``
    alternating runs: on a shared machine the best run is the one least
    disturbed by other load."""
    best_ours = best_bare = (0.0, float("nan"))
    for _ in range(rounds):
        best_ours = max(best_ours, ours.measure(), key=lambda m: m[0])
        best_bare = max(best_bare, bare.measure(), key=lambda m: m[0])
    return best_ours, best_bare


def run_all(client: RpcClient, bare_endpoint: str, rows_list: list[int], num_nodes: int,
            depths: list[int], seconds: float, rounds: int, server_pid: int, bare_pid: int,
            shm: bool = True) -> None:
    """Runs and prints every figure (``shm``: also the same-host path).

    ``server_pid``/``bare_pid``: the partition server's and the bare echo's
    processes, whose CPU time counts for their side.
    """
    gen = torch.Generator().manual_seed(1)
    print(f"loopback, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"zmq {zmq.zmq_version()}, best of {rounds} x {seconds:g} s per figure; "
          f"cpu: client + server CPU us per request")
    print(f"{'workload':<30}{'depth':>6}{'pyg-dist':>14}{'bare zmq':>14}{'ratio':>8}"
          f"{'cpu ours':>10}{'cpu bare':>10}")

    def row(label: str, depth: int, ours: Callable[[], tuple[int, float]], bare_which: int,
            request_bytes: int, nbytes: Optional[int] = None) -> None:
        (rate, cpu), (bare_rate, bare_cpu) = _best_of(
            rounds, Side(ours, server_pid),
            Side(partial(bench_bare, bare_endpoint, bare_which, request_bytes, depth, seconds),
                 bare_pid))
        if nbytes is None:
            figures = f"{rate:>11.0f}r/s{bare_rate:>11.0f}r/s"
        else:
            figures = f"{rate * nbytes / 1e9:>10.2f}GB/s{bare_rate * nbytes / 1e9:>10.2f}GB/s"
        print(f"{label:<30}{depth:>6}{figures}{rate / bare_rate:>8.2f}{cpu:>10.0f}"
              f"{bare_cpu:>10.0f}", flush=True)

    for depth in depths:
        for i, rows in enumerate(rows_list):
            ids = torch.randperm(num_nodes, generator=gen)[:rows]
            nbytes = rows * FEATURES * 4
            row(f"get {rows} rows ({nbytes / 1e6:.1f} MB)", depth,
                partial(bench_pyg, client, "get", {"groups": [{"attrs": ["x"]}]}, ids, depth,
                        seconds),
                i, ids.numel() * 8, nbytes)
            if shm:
                row("  same host, shared memory", depth,
                    partial(bench_pyg_shm, client, ids, nbytes, depth, seconds),
                    i, ids.numel() * 8, nbytes)
        seeds = torch.randperm(num_nodes, generator=gen)[:16]
        args = {"edge_types": [None], "num_neighbors": 10, "replace": False, "seed": 7}
        row("sample 16 seeds, fan-out 10", depth,
            partial(bench_pyg, client, "sample", args, seeds, depth, seconds),
            len(rows_list), 16 * 8)
        row("ping (RPC layer alone)", depth,
            partial(bench_pyg, client, "ping", {}, None, depth, seconds),
            len(rows_list) + 1, 0)


if __name__ == "__main__":
    main()
