"""The ZeroMQ sockets of the RPC layer, set up in one place.

* :func:`open_dealer`: the socket an :class:`~pyg_dist.rpc.client.RpcClient`
  opens to one server. One DEALER per server, with the options that make the
  client's promises hold: calls queue instead of failing while a server
  (re)starts, replies are always read (so libzmq always reads the server's
  heartbeats too), a lost connection is retried at least every second,
  heartbeats tell a frozen or unreachable server from a slow one, and CURVE
  when the config asks for it. A monitor socket, opened before the DEALER
  connects, reports its connection events (:mod:`pyg_dist.rpc.liveness`).
* :func:`router_socket` and :func:`start_authenticator`: the server's ROUTER
  and CURVE authenticator. Every option bounds what one peer can make the
  server hold or wait for (frame size, handshake time, queued requests and
  replies, silent peers); :class:`~pyg_dist.rpc.server.RpcServer` binds the
  socket and owns it on its I/O thread.
* :func:`send_frames`: a multipart message sent with as little Python per
  frame as possible. ``zmq.Socket.send_multipart`` type-checks every frame
  and combines its flags as ``zmq.SNDMORE | flags``, an ``IntFlag`` operation
  that builds a new enum member per frame. On the small calls that dominate
  sampling, those microseconds are a visible share of a round trip (4 frames
  sent and received: 11 us with ``send_multipart``, 8 us with
  :func:`send_frames`), and every frame this package sends was built by its
  own encoder, so the checks find nothing.
* :func:`recv_frames`: the waiting multipart message, if any, likewise.
  ``recv_multipart`` asks the socket for ``RCVMORE`` after every frame (a
  ``getsockopt``, which turns the option into an enum member first), and
  a loop that reads until ``zmq.Again`` pays for an exception at the end
  of every batch: a 3-frame message read 3.7-4.2 us with
  ``recv_multipart``, 1.5 us here; the ``Again`` 3.2 us against 1.3 us for
  asking the socket's events.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, Optional

import zmq
from zmq.auth.thread import ThreadAuthenticator

from pyg_dist.errors import TransportError
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.liveness import (
    RECONNECT_IVL_MAX_MS,
    RECONNECT_IVL_MS,
    PeerStates,
    set_heartbeats,
)

logger = logging.getLogger(__name__)

# Plain ints: combining IntFlag members costs a Python-level enum call.
POLLIN = int(zmq.POLLIN)
NOBLOCK = int(zmq.NOBLOCK)
_MORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)


def send_frames(sock: zmq.Socket, frames: Sequence[Any]) -> None:
    """Sends ``frames`` as one message, without copying, without blocking.

    Like ``sock.send_multipart(frames, zmq.NOBLOCK, copy=False)``: raises
    ``zmq.Again`` when the socket refuses the message (libzmq decides on the
    first frame; once that is taken, it takes the rest of the message).

    Args:
        sock: The socket, used only by the calling thread.
        frames: Non-empty buffers (bytes, memoryviews, ``zmq.Frame``).
    """
    send = sock.send
    for frame in frames[:-1]:
        send(frame, _MORE_NOBLOCK, copy=False)
    send(frames[-1], NOBLOCK, copy=False)


def recv_frames(sock: zmq.Socket) -> Optional[list[zmq.Frame]]:
    """The next waiting message as frames (not copied), or ``None`` when
    none waits; never blocks.

    Like ``sock.recv_multipart(zmq.NOBLOCK, copy=False)`` without its
    ``zmq.Again`` (see the module). Asking for the socket's events also
    re-arms its file descriptor, as a refused read would.

    Args:
        sock: The socket, used only by the calling thread.
    """
    if not sock.getsockopt(zmq.EVENTS) & POLLIN:
        return None
    recv = sock.recv
    frame = recv(NOBLOCK, copy=False)
    frames = [frame]
    # libzmq hands a multipart message over whole: once its first frame
    # is taken, the others are there.
    while frame.more:
        frame = recv(NOBLOCK, copy=False)
        frames.append(frame)
    return frames


def open_dealer(ctx: zmq.Context, endpoint: str, config: RpcConfig,
                peers: PeerStates) -> tuple[zmq.Socket, zmq.Socket]:
    """Opens and connects the DEALER to ``endpoint`` and its monitor socket.

    Args:
        ctx: The client's context.
        endpoint: A normalised endpoint
            (:func:`pyg_dist.rpc.client.normalize_endpoint`).
        config: The client's configuration.
        peers: Where the client tracks its servers' connections.

    Returns:
        ``(dealer, monitor)``; both are the client I/O thread's to close.

    Raises:
        zmq.ZMQError: if libzmq refuses an option or the endpoint; nothing is
            left open then.
    """
    sock = ctx.socket(zmq.DEALER)
    try:
        _set_options(sock, config)
        monitor = peers.watch(sock)  # before connecting: see the first handshake
    except BaseException:
        sock.close(linger=0)  # an open socket would block Context.term()
        raise
    try:
        sock.connect(endpoint)
    except BaseException:
        monitor.close(linger=0)
        sock.close(linger=0)
        raise
    return sock, monitor


def _set_options(sock: zmq.Socket, config: RpcConfig) -> None:
    sock.linger = 0
    # Queue rather than refuse while a server (re)starts; deadlines and the
    # reconnect grace bound how long a call can wait there.
    sock.sndhwm = config.max_in_flight + 16
    # Never stop reading: libzmq then also reads the server's PINGs at once.
    # What that lets a server make us hold is bounded by a ReplyGuard; no
    # single frame may exceed the same bound.
    sock.rcvhwm = 0
    sock.setsockopt(zmq.MAXMSGSIZE, config.reply_receive_limit)
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
    set_heartbeats(sock, config)
    if config.curve_client:
        if config.client_public_key is None or config.client_secret_key is None:
            public, secret = zmq.curve_keypair()
        else:
            public = config.client_public_key.encode()
            secret = config.client_secret_key.encode()
        sock.curve_serverkey = config.server_public_key.encode()
        sock.curve_publickey = public
        sock.curve_secretkey = secret


def router_socket(ctx: zmq.Context, config: RpcConfig) -> zmq.Socket:
    """A ROUTER socket with the server's limits set, not yet bound.

    Args:
        ctx: The server's context.
        config: Limits, heartbeats and CURVE keys.
    """
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    # libzmq drops the connection of a peer announcing a frame larger than
    # this before buffering it (handshake commands included); a request
    # whose frames together exceed it gets an error reply from
    # decode_request, and one that never ends is the ReceiveGuard's.
    router.setsockopt(zmq.MAXMSGSIZE, config.max_message_bytes)
    # A peer that connects and never finishes the greeting or the CURVE
    # handshake is dropped after this long (libzmq's default is 30 s).
    router.setsockopt(zmq.HANDSHAKE_IVL, int(config.handshake_timeout * 1000))
    # Incoming: at most max_queued requests wait in libzmq per client
    # besides the inbox; beyond that libzmq stops reading that client's TCP
    # connection, so a busy server pushes back instead of buffering.
    # Outgoing: a bounded queue per client; ROUTER_MANDATORY makes a full
    # one visible (zmq.Again) instead of a silent drop, to log it.
    router.rcvhwm = config.max_queued
    router.sndhwm = config.reply_hwm
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    # Drop the connection (and queued replies) of a client that froze or
    # became unreachable; libzmq answers clients' PINGs by itself.
    set_heartbeats(router, config)
    if config.curve_server:
        router.curve_server = True
        router.curve_secretkey = config.server_secret_key.encode()
        router.curve_publickey = (config.server_public_key or "").encode()
    return router


def start_authenticator(ctx: zmq.Context, config: RpcConfig,
                        bind: str) -> Optional[ThreadAuthenticator]:
    """With CURVE and an authorised-keys directory, admits only those
    clients (a ZAP handler in its own thread, on the server's context).

    Args:
        ctx: The server's context.
        config: The server's configuration.
        bind: The endpoint, named in errors.

    Returns:
        The running authenticator (stop it with the server), or ``None``
        when every client that knows the server's key is admitted.

    Raises:
        TransportError: if the directory does not exist.
    """
    directory = config.authorized_keys_dir
    if not config.curve_server or directory is None:
        return None
    if not os.path.isdir(directory):
        raise TransportError(f"authorised CURVE keys directory {directory} does not "
                             f"exist; create it and copy the clients' public .key "
                             f"files into it", address=bind)
    auth = ThreadAuthenticator(ctx, log=logger)
    auth.start()
    auth.configure_curve(domain="*", location=directory)
    return auth
