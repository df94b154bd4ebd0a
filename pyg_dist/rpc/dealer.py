"""The socket an :class:`~pyg_dist.rpc.client.RpcClient` opens to one server.

One DEALER per server, with the options that make the client's promises
hold: calls queue instead of failing while a server (re)starts, replies are
always read (so libzmq always reads the server's heartbeats too), a lost
connection is retried at least every second, heartbeats tell a frozen or
unreachable server from a slow one, and CURVE when the config asks for it.
A monitor socket, opened before the DEALER connects, reports its connection
events (:mod:`pyg_dist.rpc.liveness`).
"""

from __future__ import annotations

import zmq

from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.liveness import (
    RECONNECT_IVL_MAX_MS,
    RECONNECT_IVL_MS,
    PeerStates,
    set_heartbeats,
)


def open_dealer(ctx: zmq.Context, endpoint: str, config: RpcConfig,
                peers: PeerStates) -> tuple[zmq.Socket, zmq.Socket]:
    """Opens and connects the DEALER to ``endpoint`` and its monitor socket.

    Args:
        ctx: The client's context.
        endpoint: A normalised endpoint
            (:func:`pyg_dist.rpc.endpoints.normalize_endpoint`).
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
