"""What libzmq holds for one server's replies on a client, and cutting a
server that sends more.

A client reads its DEALERs without a high-water mark (so that heartbeats are
always read), and libzmq hands over a multipart message only once its last
frame arrived: a server streaming one never-finished reply would make the
client buffer without limit. The client therefore accounts for its
connection to every server as the server does for its clients
(:mod:`pyg_dist.rpc.connections`): the kernel's count of bytes received on
the connection, less those still in its queue, less the wire size of the
replies the client took, is what libzmq holds. Over
``RpcConfig.reply_receive_limit`` the connection is cut
(``shutdown(SHUT_RDWR)`` on our duplicate of its descriptor: libzmq frees
the buffers) and the calls awaiting that server's replies fail with a
:class:`~pyg_dist.errors.ProtocolError` naming it and the bound.

``MAXMSGSIZE`` is set to the same bound: one frame over it is refused by
libzmq itself before it is buffered.

Residual overshoot (``docs/reliability.md``): what the server sends between
two checks (every ``interval``, 10 ms) plus the kernel's receive buffer.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any, Optional

import zmq

from pyg_dist.rpc.connections import TrackedConnection, tcp_duplicate, wire_bytes

logger = logging.getLogger(__name__)


class ReplyGuard:
    """Bounds what libzmq holds for the replies of one server (a client's
    DEALER to it). Used only by the client's I/O thread.

    Args:
        budget: Most bytes libzmq may hold for the server's connection.
        curve: Whether the connection speaks CURVE.
        interval: Seconds between checks while connected.
    """

    def __init__(self, budget: int, curve: bool, interval: float = 0.01) -> None:
        self.budget = int(budget)
        self.curve = curve
        self.interval = interval
        self._conns: dict[int, TrackedConnection] = {}
        self._next_check = 0.0
        self.cuts = 0
        self.max_held_seen = 0

    def connected(self, fd: int) -> None:
        """A connection to the server was made on descriptor ``fd``."""
        self.disconnected(fd)  # a stale entry whose end was missed
        sock = tcp_duplicate(fd)
        if sock is None:
            return  # closed again already, or not TCP (not accounted)
        conn = TrackedConnection(fd, sock, time.monotonic())
        # Replies may have been taken before this event was read (their
        # bytes would count as held ever after): what libzmq read so far
        # counts as taken. At most what arrived since the connect escapes
        # the budget, a few milliseconds' worth.
        try:
            conn.libzmq_held(conn.since)
        except OSError:
            sock.close()
            return
        conn.delivered += conn.unexplained
        self._conns[fd] = conn

    def disconnected(self, fd: int) -> None:
        """The connection on descriptor ``fd`` ended."""
        conn = self._conns.pop(fd, None)
        if conn is not None:
            conn.sock.close()

    def took(self, frames: list[Any]) -> None:
        """Accounts a reply the client took (frames received with ``copy=False``)."""
        if not frames or not self._conns:
            return
        try:
            fd = frames[0].get(zmq.SRCFD)
        except (zmq.ZMQError, AttributeError):
            return
        conn = self._conns.get(fd)
        if conn is not None:
            conn.delivered += wire_bytes(frames, self.curve)

    def timeout_ms(self, now: float) -> Optional[int]:
        """Milliseconds until the next check; ``None`` while not connected."""
        if not self._conns:
            return None
        return max(0, int((self._next_check - now) * 1000) + 1)

    def check(self, now: float) -> Optional[int]:
        """Measures the connection if a check is due, and cuts it when over
        the budget.

        Returns:
            The bytes libzmq held when the connection was cut, else ``None``.
        """
        if now < self._next_check or not self._conns:
            return None
        self._next_check = now + self.interval
        for fd, conn in list(self._conns.items()):
            if conn.cut:
                continue
            try:
                held = conn.libzmq_held(now)
            except OSError:
                self.disconnected(fd)
                continue
            self.max_held_seen = max(self.max_held_seen, held)
            if held > self.budget:
                conn.cut = True
                self.cuts += 1
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # gone already: libzmq frees its buffers anyway
                return held
        return None

    def close(self) -> None:
        """Closes every duplicate descriptor."""
        for conn in self._conns.values():
            conn.sock.close()
        self._conns.clear()
