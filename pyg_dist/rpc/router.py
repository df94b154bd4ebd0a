"""The server's ROUTER socket and CURVE authenticator, set up in one place.

Every option here bounds what one peer can make the server hold or wait
for (frame size, handshake time, queued requests and replies, silent
peers); :class:`~pyg_dist.rpc.server.RpcServer` binds the socket and owns it
on its I/O thread.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import zmq
from zmq.auth.thread import ThreadAuthenticator

from pyg_dist.errors import TransportError
from pyg_dist.rpc.config import RpcConfig
from pyg_dist.rpc.liveness import set_heartbeats

logger = logging.getLogger(__name__)


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
