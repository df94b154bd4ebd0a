"""A TCP proxy that can black-hole a link, for link-down tests without root.

A pulled cable or a dead switch closes no connection: both ends keep their
sockets open and simply hear nothing more. :class:`BlackholeProxy` sits
between a client and a server on loopback and forwards bytes both ways until
:meth:`~BlackholeProxy.cut` is called; from then on everything either side
sends is read and dropped (as by the dead link), no connection is closed,
and new connections are accepted but get nothing through.
:meth:`~BlackholeProxy.restore` closes the black-holed connections (their
byte streams lost data and cannot resume) and forwards again;
:meth:`~BlackholeProxy.reset` closes the current connections at once, as
the kernel of a crashed server does.

Example::

    with BlackholeProxy(server_endpoint) as proxy:
        client = RpcClient([proxy.endpoint])
        ...
        proxy.cut()
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Optional

_CHUNK = 1 << 16


class BlackholeProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` until cut.

    Args:
        upstream: The server, ``tcp://host:port``.
        join_timeout: Seconds :meth:`close` waits for each of its threads.
    """

    def __init__(self, upstream: str, join_timeout: float = 10.0) -> None:
        host, _, port = upstream.removeprefix("tcp://").rpartition(":")
        self._upstream = (host, int(port))
        self._join_timeout = join_timeout
        self._dark = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # to notice close() between accepts
        self.endpoint = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._start(self._accept_loop, "accept")

    def cut(self) -> None:
        """Drops every byte from now on, in both directions; closes nothing."""
        self._dark.set()

    def restore(self) -> None:
        """Closes the connections that lost bytes and forwards new ones."""
        self.reset()
        self._dark.clear()

    def reset(self) -> None:
        """Closes every current connection at both ends (as a crashed peer's
        kernel does) and keeps accepting new ones."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            _shut(*pair)

    def close(self) -> None:
        """Closes every connection and the listener and joins every thread.

        Raises:
            AssertionError: if a thread is still running after the timeout.
        """
        self._stop.set()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            _shut(*pair)
        for thread in list(self._threads):
            thread.join(self._join_timeout)
        self._listener.close()
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"proxy threads still running: {alive}"

    def __enter__(self) -> BlackholeProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, target, name: str, *args) -> None:
        thread = threading.Thread(target=target, args=args, name=f"blackhole-proxy-{name}",
                                  daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream: Optional[socket.socket] = None
            try:
                upstream = socket.create_connection(self._upstream, timeout=5.0)
                upstream.settimeout(None)
            except OSError:  # server gone: the client sees a closed connection
                downstream.close()
                continue
            downstream.settimeout(None)
            with self._lock:
                if self._stop.is_set():
                    _shut(downstream, upstream)
                    return
                self._pairs.append((downstream, upstream))
            self._start(self._pump, "up", downstream, upstream)
            self._start(self._pump, "down", upstream, downstream)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(_CHUNK)
            except OSError:
                break
            if not data:
                break
            if self._dark.is_set():
                continue  # lost on the dead link
            try:
                sink.sendall(data)
            except OSError:
                break
        _shut(source, sink)


def _shut(*socks: socket.socket) -> None:
    # shutdown() wakes a thread blocked in recv() on the socket; close()
    # alone would not.
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
