"""What libzmq holds for each peer of a server, and cutting peers that hold too much.

libzmq hands a multipart message to the application only once its last
frame arrived, and its high-water marks count complete messages, so no socket
option bounds an *unfinished* message: ``MAXMSGSIZE`` limits one frame, and
a peer sending frames with the more-flag set and never the last one makes
libzmq buffer all of them. The same holds for a CURVE handshake, which libzmq
buffers before it knows who the peer is. The server therefore accounts for
every TCP connection itself:

* A socket monitor on the ROUTER reports every accepted connection with its
  file descriptor (before any handshake, so unauthenticated CURVE peers are
  covered) and every connection that ended.
* The kernel counts the bytes received on a connection
  (``TCP_INFO.tcpi_bytes_received``, Linux 4.1 and later) and the bytes still
  waiting in its queue (``FIONREAD``); the difference is what libzmq has read.
* Every message the server takes from the ROUTER names the descriptor it came
  from (``zmq.SRCFD``); its exact size on the wire (frame headers and, with
  CURVE, the ``MESSAGE`` command around each frame) is subtracted.

What is left is what libzmq still holds for that peer: an unfinished
message, complete requests the server has not taken yet, handshake and
heartbeat commands. :meth:`ReceiveGuard.check` cuts a connection over the
per-client budget, and the biggest ones while the sum is over the per-server
budget, with ``shutdown(SHUT_RDWR)`` on a duplicate of its descriptor: libzmq
sees the connection end and frees that peer's buffers.

Residual limits (``docs/reliability.md``): the check runs every few
milliseconds, so a fast peer overshoots by what it sends meanwhile; libzmq
keeps 64 bytes per frame besides its payload, so a peer sending empty frames
makes libzmq hold up to 32 times the bytes it sent; transports other than TCP
(``ipc://``) are not accounted.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import struct
import termios
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

import zmq
from zmq.utils.monitor import recv_monitor_message

logger = logging.getLogger(__name__)

# struct tcp_info (linux/tcp.h): the u64 tcpi_bytes_received sits at byte 128
# (after 8 u8 fields, 24 u32 fields and three u64 fields).
_TCP_INFO_BYTES_RECEIVED = 128
_TCP_INFO_MIN_LEN = _TCP_INFO_BYTES_RECEIVED + 8
_UNPACK_U64 = struct.Struct("=Q").unpack_from
_UNPACK_INT = struct.Struct("=i").unpack
_FIONREAD_BUF = bytes(4)
# Bytes a connection may hold that never become messages: the greeting (64),
# the handshake (NULL ~100, CURVE HELLO + INITIATE ~600 with metadata) and one
# read batch of libzmq (8 KiB). A bigger handshake counts against the budget.
SLACK_BYTES = 64 << 10
# ZMTP heartbeats (PING and PONG commands) are read but never become
# messages; a connection is allowed this many such bytes per second of its
# age, enough for heartbeats both ways every 0.7 s with CURVE (42 + 40 bytes).
COMMAND_BYTES_PER_S = 128
# Each frame under CURVE travels inside a MESSAGE command: "\x07MESSAGE",
# an 8-byte nonce, a 16-byte MAC and a flags byte around the payload.
CURVE_FRAME_OVERHEAD = 33
# One check reads two kernel counters per connection (a few microseconds);
# checking all of them at most this share of the time keeps the I/O thread's
# cost small with many connections.
_CHECK_SHARE = 0.02
_CHECK_COST_S = 5e-6
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


def wire_bytes(frames: Iterable[Any], curve: bool) -> int:
    """Exact bytes the given received frames took on the wire (ZMTP 3).

    Args:
        frames: The frames as received, without the ROUTER's routing id.
        curve: Whether the connection speaks CURVE.
    """
    total = 0
    extra = CURVE_FRAME_OVERHEAD if curve else 0
    for frame in frames:
        body = len(frame) + extra
        total += body + (2 if body <= 255 else 9)
    return total


def tcp_duplicate(fd: int) -> Optional[socket.socket]:
    """Our own duplicate of a libzmq connection's descriptor, so its kernel
    counters stay readable and ``shutdown()`` works whatever libzmq does with
    its own; ``None`` if it closed already or is not TCP (not accounted)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
        sock.close()
        return None
    return sock


@dataclass
class TrackedConnection:
    """One TCP connection of a ZeroMQ socket (accepted by a server's ROUTER or
    made by a client's DEALER), through our own duplicate of its fd."""

    fd: int
    sock: socket.socket
    since: float
    delivered: int = 0  # wire bytes of the messages the server took from it
    held: int = 0  # at the last check, beyond the allowance
    unexplained: int = 0  # at the last check: read by libzmq, not taken, no allowance
    outq: int = -1  # at the last check: bytes sent and not yet acknowledged by the peer
    cut: bool = False
    identities: set[bytes] = field(default_factory=set)

    def libzmq_held(self, now: float) -> int:
        """Bytes libzmq holds for this peer beyond the allowed slack.

        Raises:
            OSError: if the descriptor no longer is a TCP socket.
        """
        info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        if len(info) < _TCP_INFO_MIN_LEN:
            raise OSError("TCP_INFO without tcpi_bytes_received (Linux < 4.1)")
        received = _UNPACK_U64(info, _TCP_INFO_BYTES_RECEIVED)[0]
        fd = self.sock.fileno()
        queued = _UNPACK_INT(fcntl.ioctl(fd, termios.FIONREAD, _FIONREAD_BUF))[0]
        self.outq = _UNPACK_INT(fcntl.ioctl(fd, termios.TIOCOUTQ, _FIONREAD_BUF))[0]
        self.unexplained = received - queued - self.delivered
        allowance = SLACK_BYTES + int((now - self.since) * COMMAND_BYTES_PER_S)
        return max(0, self.unexplained - allowance)

    def peer(self) -> str:
        try:
            host, port = self.sock.getpeername()[:2]
            return f"{host}:{port}"
        except OSError:
            return "(gone)"


class ReceiveGuard:
    """Bounds what libzmq buffers per connection of one ROUTER socket.

    Used by the server's I/O thread only (it owns the ROUTER and the
    monitor socket).

    Args:
        router: The server's bound ROUTER socket.
        client_budget: Most bytes libzmq may hold for one connection.
        server_budget: Most bytes libzmq may hold for all connections
            together, plus the request bytes queued for workers (:meth:`check`).
        curve: Whether the ROUTER speaks CURVE (frames cost more on the wire).
        name: The server's name, for logs.
        interval: Seconds between checks with few connections.
    """

    def __init__(self, router: zmq.Socket, client_budget: int, server_budget: int,
                 curve: bool, name: str, interval: float = 0.005) -> None:
        self.client_budget = int(client_budget)
        self.server_budget = int(server_budget)
        self.curve = curve
        self.name = name
        self.interval = interval
        self.monitor = router.get_monitor_socket(_EVENTS)
        self._router = router
        self._conns: dict[int, TrackedConnection] = {}
        self._next_check = 0.0
        self._untracked_logged = False
        self.cuts = 0
        self.checks = 0  # checks completed: a figure of usage() is at most one old
        self.max_held_seen = 0  # biggest per-connection hold seen at a check

    # Events ################################################################

    def handle_events(self) -> list[bytes]:
        """Takes every pending monitor event; returns the routing ids of the
        connections that ended (their replies' accounting can go)."""
        ended: list[bytes] = []
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return ended
            fd = event["value"]
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._drop(fd, ended)  # a stale entry whose end we missed
                self._accept(fd)
            else:
                self._drop(fd, ended)

    def _accept(self, fd: int) -> None:
        sock = tcp_duplicate(fd)
        if sock is None:
            if not self._untracked_logged:
                logger.info("%s: connections over a transport other than TCP are not "
                            "accounted (no per-connection byte budget)", self.name)
                self._untracked_logged = True
            return
        self._conns[fd] = TrackedConnection(fd, sock, time.monotonic())

    def _drop(self, fd: int, ended: list[bytes]) -> None:
        conn = self._conns.pop(fd, None)
        if conn is not None:
            conn.sock.close()
            ended.extend(conn.identities)

    # Accounting ############################################################

    def took(self, msg: list[Any]) -> None:
        """Accounts a message the server took from the ROUTER.

        Args:
            msg: Its frames as received with ``copy=False``: routing id first.
        """
        if len(msg) < 2:
            return
        try:
            fd = msg[1].get(zmq.SRCFD)
        except (zmq.ZMQError, AttributeError):
            return
        conn = self._conns.get(fd)
        if conn is None:
            # Accepted after the last look at the monitor: look again.
            self.handle_events()
            conn = self._conns.get(fd)
            if conn is None:
                return
        conn.delivered += wire_bytes(msg[1:], self.curve)
        if len(conn.identities) < 4:
            conn.identities.add(msg[0].bytes)

    def due(self, now: float) -> bool:
        """Whether :meth:`check` is due."""
        return now >= self._next_check

    def timeout_ms(self, now: float) -> Optional[int]:
        """Milliseconds until the next check (for the I/O thread's poll);
        ``None`` (wait for events only) while there is no connection."""
        if not self._conns:
            return None
        return max(0, int((self._next_check - now) * 1000) + 1)

    def check(self, now: float, queued_bytes: int = 0) -> int:
        """Measures every connection and cuts those over budget.

        Args:
            now: ``time.monotonic()``.
            queued_bytes: Request bytes the server holds itself (waiting for
                a worker); they count against the server budget.

        Returns:
            The bytes libzmq holds for all connections together.
        """
        total = 0
        for fd, conn in list(self._conns.items()):
            if conn.cut:
                continue
            try:
                conn.held = conn.libzmq_held(now)
            except OSError:
                self._drop(fd, [])
                continue
            total += conn.held
            if conn.held > self.max_held_seen:
                self.max_held_seen = conn.held
            if conn.held > self.client_budget:
                total -= conn.held
                self._cut(conn, f"over the per-client budget of {self.client_budget} bytes")
        if total + queued_bytes > self.server_budget:
            live = sorted((c for c in self._conns.values() if not c.cut),
                          key=lambda c: c.held, reverse=True)
            for conn in live:
                if total + queued_bytes <= self.server_budget or conn.held == 0:
                    break
                total -= conn.held
                self._cut(conn, f"the biggest while all connections held more than the "
                                f"per-server budget of {self.server_budget} bytes")
        self._next_check = now + max(self.interval,
                                     len(self._conns) * _CHECK_COST_S / _CHECK_SHARE)
        self.checks += 1
        return total

    def _cut(self, conn: TrackedConnection, why: str) -> None:
        logger.warning("%s: cutting the connection from %s: libzmq holds %d bytes of "
                       "unfinished or untaken messages for it, %s (PYG_DIST_CLIENT_RECEIVE_"
                       "BUDGET, PYG_DIST_SERVER_RECEIVE_BUDGET)", self.name, conn.peer(),
                       conn.held, why)
        conn.cut = True
        self.cuts += 1
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # gone already: libzmq frees its buffers anyway

    def drained(self) -> list[bytes]:
        """Routing ids of the connections whose peer, at the last check, had
        acknowledged every byte sent to it: libzmq writes a peer's queued
        replies into the kernel as soon as there is room, so an empty send
        queue means it holds no reply for that peer (give or take the one it
        is writing)."""
        return [identity for conn in self._conns.values() if conn.outq == 0 and not conn.cut
                for identity in conn.identities]

    def usage(self) -> dict[str, int]:
        """Figures of the last check: ``connections``, ``held`` (beyond the
        allowances, all connections), ``unexplained`` (bytes libzmq read and
        the server did not take, handshakes included), ``max_held`` (the
        most one connection held at any check), ``cuts`` so far and
        ``checks`` completed (the figures of a check that began after some
        moment are in once ``checks`` grew by two since then)."""
        live = [c for c in list(self._conns.values()) if not c.cut]
        return {"connections": len(live), "held": sum(c.held for c in live),
                "unexplained": sum(c.unexplained for c in live),
                "max_held": self.max_held_seen, "cuts": self.cuts, "checks": self.checks}

    def close(self) -> None:
        """Closes every duplicate descriptor and the monitor socket."""
        for conn in self._conns.values():
            conn.sock.close()
        self._conns.clear()
        try:
            self._router.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close()
