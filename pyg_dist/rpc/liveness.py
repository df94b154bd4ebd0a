"""Telling a dead, frozen or unreachable server from a slow one.

Two signals, both from libzmq:

* **ZMTP heartbeats** (:func:`set_heartbeats`, on the client's DEALERs and
  the server's ROUTER). Each side sends a PING every ``heartbeat_interval``;
  libzmq answers a PING with a PONG on its own I/O thread, so a server busy
  in a handler, or holding the GIL, still answers, while a frozen process
  (SIGSTOP) or a dead link does not. libzmq closes a connection that stays
  silent for ``ZMQ_HEARTBEAT_TIMEOUT`` after a PING; the silence may begin
  just after a PONG, up to one interval before the next PING, so that
  option is ``heartbeat_timeout - heartbeat_interval``: a silent peer is
  noticed within ``heartbeat_timeout``.
* **Connection events** (:class:`PeerStates`): a monitor socket per DEALER
  reports the ZMTP handshake completing (the server is *up*) and the
  connection ending (*down*): at once when the server process dies (the
  kernel closes its sockets), after the heartbeat timeout when it froze or
  the link broke.

The client's I/O thread owns the monitor sockets (ZeroMQ sockets are not
thread-safe) and turns a *down* into failed calls (see
:meth:`pyg_dist.rpc.client.IoState.lost`). A server that was never up (not
started yet, wrong address, refused CURVE keys) is not *down*: its calls keep
their whole deadline, since there is no connection whose loss says more.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import zmq
from zmq.utils.monitor import recv_monitor_message

from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.reply_guard import ReplyGuard

logger = logging.getLogger(__name__)

# libzmq retries a lost connection every RECONNECT_IVL, doubling up to
# RECONNECT_IVL_MAX: a server restarted on its address is found within a
# second, well inside the default reconnect grace.
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 1000

# HANDSHAKE_SUCCEEDED, not CONNECTED: the kernel completes a TCP connect to a
# frozen process's listening socket, but only a live one answers the ZMTP
# greeting.
WATCHED_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
# CONNECTED only hands the connection's descriptor to a ReplyGuard.
_CONNECTION_EVENTS = WATCHED_EVENTS | zmq.EVENT_CONNECTED

UP, DOWN = "up", "down"


def set_heartbeats(sock: zmq.Socket, config: RpcConfig) -> None:
    """Turns on ZMTP heartbeats on ``sock`` (before it connects or binds).

    Args:
        sock: A DEALER or ROUTER socket, not yet connected or bound.
        config: ``heartbeat_interval`` (``0``: no heartbeats) and
            ``heartbeat_timeout``, within which a silent peer's connection is
            closed; it is also the time-to-live the peer is asked to keep
            this side's connection for without traffic.
    """
    if config.heartbeat_interval <= 0:
        return
    interval_ms = max(1, round(config.heartbeat_interval * 1000))
    timeout_ms = max(interval_ms + 1, round(config.heartbeat_timeout * 1000))
    sock.setsockopt(zmq.HEARTBEAT_IVL, interval_ms)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout_ms - interval_ms)
    # Sent in whole tenths of a second: round up, never to zero.
    sock.setsockopt(zmq.HEARTBEAT_TTL, max(100, -(-timeout_ms // 100) * 100))


class PeerStates:
    """Whether each server of a client is up, and since when it is down.

    Used only by the client's I/O thread (and under its I/O lock), like the
    sockets it watches.

    Args:
        count: Number of servers.
    """

    def __init__(self, count: int) -> None:
        self._up = [False] * count
        self._down_since: list[Optional[float]] = [None] * count

    def watch(self, sock: zmq.Socket) -> zmq.Socket:
        """Opens the monitor socket of ``sock`` (before ``sock`` connects).

        Returns:
            A PAIR socket that receives ``sock``'s handshake and disconnect
            events; poll it and pass it to :meth:`read`.
        """
        monitor = sock.get_monitor_socket(_CONNECTION_EVENTS)
        monitor.linger = 0
        return monitor

    def read(self, index: int, monitor: zmq.Socket,
             guard: Optional[ReplyGuard] = None) -> list[str]:
        """Takes in every event waiting on ``monitor`` (server ``index``).

        Args:
            index: The server.
            monitor: Its monitor socket (:meth:`watch`).
            guard: Told of every connection made and ended (their descriptors).

        Returns:
            The transitions, in order: :data:`UP` when a connection to the
            server completed its handshake, :data:`DOWN` when an established
            one ended (a connection that never finished its handshake
            changes nothing).
        """
        changes = []
        while True:
            try:
                message = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return changes
            event = message["event"]
            if guard is not None and event == zmq.EVENT_CONNECTED:
                guard.connected(message["value"])
            elif guard is not None and event == zmq.EVENT_DISCONNECTED:
                guard.disconnected(message["value"])
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._up[index] = True
                self._down_since[index] = None
                changes.append(UP)
            elif event == zmq.EVENT_DISCONNECTED and self._up[index]:
                self._up[index] = False
                self._down_since[index] = time.monotonic()
                changes.append(DOWN)

    def down_since(self, index: int) -> Optional[float]:
        """When server ``index`` lost its connection (``time.monotonic()``),
        or ``None`` while it is up or was never connected."""
        return self._down_since[index]

    def is_down(self, index: int) -> bool:
        """Whether server ``index`` was connected and has lost its connection."""
        return self._down_since[index] is not None


def close_monitor(sock: zmq.Socket, monitor: zmq.Socket) -> None:
    """Stops monitoring ``sock`` and closes ``monitor`` (I/O thread only)."""
    try:
        sock.disable_monitor()
    except zmq.ZMQError as exc:  # already closed: nothing left to stop
        logger.debug("disable_monitor failed: %s", exc)
    monitor.close()
