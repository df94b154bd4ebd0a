"""A rogue server for tests: a raw TCP listener on loopback speaking just
enough ZMTP 3 (:mod:`support.zmtp`) to answer every request with one reply
that never ends: frames with the more-flag set, never a last one. A real
ZeroMQ socket cannot do that (libzmq puts only complete messages on the
wire), so this is how a hostile server makes a client buffer.

Example::

    with RogueServer(total=512 << 20) as rogue:
        RpcClient([rogue.endpoint]).call(0, "meta")  # must fail, bounded
"""

from __future__ import annotations

import socket
import threading

from support.zmtp import GREETING_BYTES, frame_header, greeting, ready_command

_FRAME = 1 << 20


class RogueServer:
    """Streams up to ``total`` bytes of one unfinished reply on each
    connection once the client sent its first request.

    Args:
        total: Bytes streamed per connection at most (the stream also ends
            when the client cuts the connection).

    Attributes:
        endpoint: Where it listens (``tcp://127.0.0.1:PORT``).
        sent: Bytes the kernel took from it so far, all connections.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.endpoint = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        accept = threading.Thread(target=self._accept, name="rogue-accept", daemon=True)
        self._threads.append(accept)
        accept.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            worker = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(worker)
            worker.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10.0)
        try:
            conn.sendall(greeting(b"NULL") + ready_command(b"ROUTER"))
            _recv_exactly(conn, GREETING_BYTES)
            flags, size = _recv_exactly(conn, 2)
            _recv_exactly(conn, size)  # the client's READY
            conn.recv(1 << 16)  # its first request (or a heartbeat): answer it
            chunk = frame_header(_FRAME, more=True) + bytes(_FRAME)
            streamed = 0
            while streamed < self.total and not self._stop.is_set():
                conn.sendall(chunk)
                streamed += len(chunk)
                with self._lock:
                    self.sent += len(chunk)
        except OSError:
            return  # cut by the client, or stopped

    def close(self) -> None:
        """Stops streaming and closes every socket."""
        self._stop.set()
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
        for thread in self._threads:
            thread.join(10)

    def __enter__(self) -> RogueServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client closed the connection")
        data += chunk
    return bytes(data)
