"""A forwarding proxy that adds a fixed link delay to every ZeroMQ message.

Loopback hides the latency of a real cluster network, and ``tc netem`` is not
available everywhere, so ``pyg-dist bench --link-delay-ms D`` puts one of
these in front of every partition server (:func:`delayed_link`: one proxy
process, one thread per server): each message is held ``D`` ms on
its way to the server and ``D`` ms on its way back, so a round trip costs
``2 * D`` ms more, as over a link with ``D`` ms one-way latency.

The proxy speaks no protocol of its own: a ROUTER faces the clients and,
for each client identity, one DEALER faces the server, so the server sees
one peer per client exactly as without the proxy. All sockets belong to the
proxy's single I/O thread (pyzmq sockets are not thread-safe); ``stop()``
wakes it over ``inproc://``.

Run one as a process (one thread per upstream)::

    python -m pyg_dist_bench.link_proxy --delay-ms 5 tcp://127.0.0.1:5555

prints ``ready <endpoint> ...`` (one endpoint per upstream, in order) once
it forwards, and stops on SIGTERM / SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import logging
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Optional

import zmq

logger = logging.getLogger(__name__)


class DelayProxy:
    """Forwards messages between clients and one upstream server with a delay.

    Args:
        upstream: The server's endpoint, e.g. ``tcp://127.0.0.1:5555``.
        delay_ms: One-way delay added to every message, in milliseconds.
        bind: Where clients connect; port 0 picks a free port.
        context: The ZeroMQ context; a private one if ``None``.
    """

    def __init__(self, upstream: str, delay_ms: float, *, bind: str = "tcp://127.0.0.1:0",
                 context: Optional[zmq.Context] = None) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        self.upstream = upstream
        self.delay = delay_ms / 1000.0
        self._bind = bind
        self._ctx = context or zmq.Context.instance()
        self._control = f"inproc://delay-proxy-{uuid.uuid4().hex}"
        self._ready = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self.endpoint: Optional[str] = None

    def start(self, timeout: float = 10.0) -> str:
        """Starts the I/O thread and returns the endpoint clients connect to."""
        self._thread = threading.Thread(target=self._run, name="delay-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"delay proxy for {self.upstream} did not start in {timeout} s")
        if self._error is not None:
            raise RuntimeError(f"delay proxy for {self.upstream} failed to start") from self._error
        assert self.endpoint is not None
        return self.endpoint

    def stop(self, timeout: float = 5.0) -> None:
        """Stops forwarding and closes every socket."""
        if self._thread is None:
            return
        wake = self._ctx.socket(zmq.PAIR)
        try:
            wake.setsockopt(zmq.LINGER, 0)
            wake.connect(self._control)
            wake.send(b"stop")
        finally:
            wake.close()
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> DelayProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        ctx = self._ctx
        front = ctx.socket(zmq.ROUTER)
        control = ctx.socket(zmq.PAIR)
        backs: dict[bytes, zmq.Socket] = {}
        owner: dict[zmq.Socket, bytes] = {}
        poller = zmq.Poller()
        # (due time, tie-break, socket, frames): constant delay keeps FIFO order.
        held: list[tuple[float, int, zmq.Socket, list]] = []
        order = itertools.count()
        try:
            for s in (front, control):
                s.setsockopt(zmq.LINGER, 0)
            front.bind(self._bind)
            control.bind(self._control)
            self.endpoint = front.getsockopt_string(zmq.LAST_ENDPOINT)
            poller.register(front, zmq.POLLIN)
            poller.register(control, zmq.POLLIN)
        except BaseException as exc:  # reported by start(), then re-raised there
            self._error = exc
            self._ready.set()
            for s in (front, control):
                s.close()
            return
        self._ready.set()
        try:
            while True:
                now = time.monotonic()
                while held and held[0][0] <= now:
                    _, _, sock, frames = heapq.heappop(held)
                    sock.send_multipart(frames, copy=False)
                wait_ms = None if not held else max(0.0, (held[0][0] - now) * 1000.0)
                events = dict(poller.poll(wait_ms))
                if control in events:
                    return
                due = time.monotonic() + self.delay
                if front in events:
                    while True:
                        try:
                            ident, *frames = front.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        key = ident.bytes
                        back = backs.get(key)
                        if back is None:
                            back = ctx.socket(zmq.DEALER)
                            back.setsockopt(zmq.LINGER, 0)
                            back.connect(self.upstream)
                            backs[key] = back
                            owner[back] = key
                            poller.register(back, zmq.POLLIN)
                        heapq.heappush(held, (due, next(order), back, frames))
                for sock in [s for s in events if s in owner]:
                    while True:
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        heapq.heappush(held, (due, next(order), front, [owner[sock], *frames]))
        finally:
            for s in [front, control, *backs.values()]:
                s.close()


@contextlib.contextmanager
def delayed_link(endpoints: Sequence[str], delay_ms: float, host: str = "127.0.0.1", *,
                 startup_timeout: float = 60.0, stop_grace: float = 5.0) -> Iterator[list[str]]:
    """One proxy process in front of ``endpoints``, for the ``with`` block.

    A process of its own, so that forwarding does not compete with the
    trainer for its interpreter lock, as a network link would not.

    Args:
        endpoints: The servers' endpoints.
        delay_ms: One-way delay added to every message, in milliseconds.
        host: Address the proxy binds (port 0 per server).
        startup_timeout: Seconds to wait for the proxy's ``ready`` line.
        stop_grace: Seconds between SIGTERM and SIGKILL when the block ends.

    Yields:
        The endpoints clients connect to, in the order of ``endpoints``.

    Raises:
        RuntimeError: if the proxy does not report ready in time.
    """
    cmd = [sys.executable, "-m", "pyg_dist_bench.link_proxy", "--delay-ms", str(delay_ms),
           "--host", host, *endpoints]
    # Own session: Ctrl-C reaches the bench, which stops the proxy in order.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None  # stdout=PIPE
        # select: a proxy that never prints must not hang the bench.
        ready, _, _ = select.select([proc.stdout], [], [], startup_timeout)
        line = proc.stdout.readline().split() if ready else []
        if line[:1] != ["ready"] or len(line) != len(endpoints) + 1:
            raise RuntimeError(f"link-delay proxy did not report ready within "
                               f"{startup_timeout:g} s (exit code {proc.poll()}); run it by "
                               f"hand to see its error: {' '.join(cmd)}")
        yield line[1:]
    finally:
        proc.terminate()
        try:
            proc.wait(stop_grace)
        except subprocess.TimeoutExpired:
            logger.warning("link-delay proxy %d did not stop on SIGTERM; killing it", proc.pid)
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def main(argv: Optional[list[str]] = None) -> int:
    """Runs one proxy per upstream in this process until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m pyg_dist_bench.link_proxy",
        description="Forward ZeroMQ traffic to servers, holding every message D ms each way.")
    parser.add_argument("upstream", nargs="+", help="server endpoints, e.g. tcp://127.0.0.1:5555")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay in ms")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    proxies = [DelayProxy(up, args.delay_ms, bind=f"tcp://{args.host}:0") for up in args.upstream]
    try:
        endpoints = [p.start() for p in proxies]
        print("ready " + " ".join(endpoints), flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        for p in proxies:
            p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
