"""Deadlines and limits of the RPC layer, in one place.

:class:`RpcConfig` is the only place where pyg-dist's RPC timeouts, size
limits, concurrency bounds and retry policy are defined. Every field can be
overridden from the environment (``PYG_DIST_TIMEOUT=5`` and so on, see
:data:`ENV_VARS`), which lets an operator tune a deployment without touching
training scripts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from pyg_dist.errors import RpcError

# Field name -> environment variable that overrides it.
ENV_VARS = {
    "timeout": "PYG_DIST_TIMEOUT",
    "connect_timeout": "PYG_DIST_CONNECT_TIMEOUT",
    "max_message_bytes": "PYG_DIST_MAX_MESSAGE_BYTES",
    "max_reply_bytes": "PYG_DIST_MAX_REPLY_BYTES",
    "reply_hwm": "PYG_DIST_REPLY_HWM",
    "max_in_flight": "PYG_DIST_MAX_IN_FLIGHT",
    "workers": "PYG_DIST_WORKERS",
    "inline_bytes": "PYG_DIST_INLINE_BYTES",
    "max_queued": "PYG_DIST_MAX_QUEUED",
    "retries": "PYG_DIST_RETRIES",
    "retry_backoff": "PYG_DIST_RETRY_BACKOFF",
    "retry_backoff_max": "PYG_DIST_RETRY_BACKOFF_MAX",
    "server_secret_key": "PYG_DIST_SERVER_SECRET_KEY",
    "server_public_key": "PYG_DIST_SERVER_PUBLIC_KEY",
    "client_secret_key": "PYG_DIST_CLIENT_SECRET_KEY",
    "client_public_key": "PYG_DIST_CLIENT_PUBLIC_KEY",
    "authorized_keys_dir": "PYG_DIST_AUTHORIZED_KEYS_DIR",
    "shared_memory_bytes": "PYG_DIST_SHARED_MEMORY_BYTES",
    # Dead-peer detection.
    "heartbeat_interval": "PYG_DIST_HEARTBEAT_INTERVAL",
    "heartbeat_timeout": "PYG_DIST_HEARTBEAT_TIMEOUT",
    "reconnect_grace": "PYG_DIST_RECONNECT_GRACE",
}

# The largest time-to-live a ZMTP PING can carry (0xFFFF tenths of a second).
MAX_HEARTBEAT_TIMEOUT = 6553.5


@dataclass(frozen=True)
class RpcConfig:
    """Deadlines, limits and security settings shared by client and server.

    Args:
        timeout: Default deadline of one call in seconds, from the moment it
            is issued until its reply is decoded.
        connect_timeout: Deadline of the handshake (``ping``) a client makes
            when it first talks to a server.
        max_message_bytes: Largest request a server accepts, all frames
            together. A bigger request gets an error reply. ZeroMQ's own
            ``MAXMSGSIZE`` is set to twice this value, so a grossly oversized
            frame is dropped by libzmq before it is ever buffered in full.
        max_reply_bytes: Largest reply a server's operations produce; a
            request whose answer would be bigger (e.g. ``sample`` with a huge
            fan-out, ``get`` of too many rows) is refused before anything is
            allocated.
        reply_hwm: Replies a server queues for one client that does not read
            them; beyond it further replies to that client are dropped (its
            calls time out) and logged, so server memory stays bounded by
            about ``reply_hwm * max_reply_bytes`` per such client. Keep it at
            least twice the clients' ``max_in_flight``: libzmq updates a
            pipe's fill level only every ``hwm / 2`` messages, so the usable
            queue lies between ``hwm / 2`` and ``hwm``.
        max_in_flight: Most requests one client keeps outstanding; further
            callers block (up to their deadline) until a slot frees up.
        workers: Number of worker threads a server runs handlers on. ``0``
            runs every handler inline on the server's I/O thread: no thread
            hand-offs (lowest latency for small, cheap requests) but one
            request at a time.
        inline_bytes: Requests of at most this many bytes (all frames
            together) are served inline on the server's I/O thread even when
            it has workers: a small call then costs no thread hand-offs
            (about half its round trip on loopback). Bigger requests go to the
            workers, which serve several at once. ``0`` sends every request to
            the workers. The size stands in for the cost: a handler that is
            slow on a small request (a huge fan-out, a whole edge index)
            holds up the I/O thread, and so every other client, meanwhile.
        max_queued: Most received-but-unserved requests a server buffers in
            its inbox, and again at most per client inside libzmq; when both
            are full it stops reading that client's connection, so TCP
            pushes back on clients instead of memory growing without bound.
        retries: How often :meth:`RpcClient.call` re-sends an idempotent
            request that timed out or could not be sent. ``0`` keeps every
            call within its single deadline.
        retry_backoff: First pause between retries in seconds, doubled on
            every retry.
        retry_backoff_max: Upper bound of that pause.
        server_secret_key: Z85 CURVE secret key of the server. With it (and
            ``server_public_key``) the server encrypts and authenticates.
        server_public_key: Z85 CURVE public key of the server; a client that
            has it talks CURVE to the server.
        client_secret_key: Z85 CURVE secret key of the client; generated per
            client when the server key is set and this is not.
        client_public_key: Z85 CURVE public key matching ``client_secret_key``.
        authorized_keys_dir: With CURVE on a server: a directory of client
            public ``.key`` files (pyzmq certificates); only those clients
            may connect. ``None`` admits any client that knows the server's
            public key.
        shared_memory_bytes: With a server on the same host, the most bytes
            of shared memory (``/dev/shm``) a client process lends that
            server for feature replies, which the server then writes straight
            into instead of sending them over the socket. ``0`` sends every
            reply over the socket. See :mod:`pyg_dist.rpc.shared_memory`.
        heartbeat_interval: Seconds between the ZMTP heartbeats (PING) that
            clients and servers send on every connection; libzmq answers
            them on its own I/O thread, so a peer busy in Python still
            answers. ``0`` turns heartbeats off: a frozen or unreachable
            peer is then noticed only at the calls' deadlines (a dead one
            still at once, by its closed connection).
        heartbeat_timeout: A connection whose peer went silent (no reply,
            not even a PONG: a frozen process, a broken link) is dropped
            within this many seconds, and the calls awaiting a reply on it
            fail with :class:`~pyg_dist.errors.ServerUnavailableError`. Must
            exceed ``heartbeat_interval``: libzmq waits ``heartbeat_timeout -
            heartbeat_interval`` after a PING. It is also the time-to-live
            each side asks its peer to keep it for. Keep that wait above the
            time one frame of ``max_reply_bytes`` takes on the slowest link:
            libzmq queues a PONG behind a frame being sent.
        reconnect_grace: How long a call to a server whose connection was
            lost waits for the client to reconnect (libzmq retries every
            second at most) before it fails with ``ServerUnavailableError``;
            a server restarted on the same address within the grace serves
            it. Only with ``retries=0``: with retries, such a call keeps its
            whole deadline, so that ``retries * timeout`` still covers a
            restart.
    """

    timeout: float = 30.0
    connect_timeout: float = 10.0
    max_message_bytes: int = 1 << 30
    max_reply_bytes: int = 1 << 30
    reply_hwm: int = 2048
    max_in_flight: int = 1024
    workers: int = 4
    inline_bytes: int = 16 << 10
    max_queued: int = 4096
    retries: int = 0
    retry_backoff: float = 0.05
    retry_backoff_max: float = 1.0
    server_secret_key: Optional[str] = None
    server_public_key: Optional[str] = None
    client_secret_key: Optional[str] = None
    client_public_key: Optional[str] = None
    authorized_keys_dir: Optional[str] = None
    shared_memory_bytes: int = 256 << 20
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 5.0
    reconnect_grace: float = 2.0

    def __post_init__(self) -> None:
        positive = ("timeout", "connect_timeout", "max_message_bytes", "max_reply_bytes",
                    "reply_hwm",
                    "max_in_flight", "max_queued")
        for name in positive:
            if not getattr(self, name) > 0:
                raise RpcError(f"RpcConfig.{name} must be > 0, got "
                               f"{getattr(self, name)!r}")
        for name in ("retries", "retry_backoff", "retry_backoff_max", "workers",
                     "inline_bytes", "shared_memory_bytes", "heartbeat_interval",
                     "reconnect_grace"):
            if getattr(self, name) < 0:
                raise RpcError(f"RpcConfig.{name} must be >= 0, got "
                               f"{getattr(self, name)!r}")
        # ZMTP carries the time-to-live in a 16-bit count of 0.1 s.
        if not self.heartbeat_interval < self.heartbeat_timeout <= MAX_HEARTBEAT_TIMEOUT:
            raise RpcError(f"RpcConfig.heartbeat_timeout must exceed heartbeat_interval "
                           f"({self.heartbeat_interval!r}) and be at most "
                           f"{MAX_HEARTBEAT_TIMEOUT} seconds, got {self.heartbeat_timeout!r}")

    @property
    def curve_server(self) -> bool:
        """Whether this configuration makes a server speak CURVE."""
        return self.server_secret_key is not None

    @property
    def curve_client(self) -> bool:
        """Whether this configuration makes a client speak CURVE."""
        return self.server_public_key is not None

    def replace(self, **changes: object) -> RpcConfig:
        """Returns a copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None,
                 **overrides: object) -> RpcConfig:
        """Builds a configuration from defaults, the environment and overrides.

        Args:
            environ: The environment to read; ``os.environ`` by default.
            **overrides: Field values that win over the environment.

        Raises:
            RpcError: if an environment variable does not parse.
        """
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            var = ENV_VARS.get(field.name)
            if var is None or var not in environ:
                continue
            raw = environ[var]
            kind = type(field.default) if field.default is not None else str
            try:
                values[field.name] = kind(raw)
            except ValueError as exc:
                raise RpcError(f"environment variable {var}={raw!r} is not a "
                               f"valid {kind.__name__}") from exc
        values.update(overrides)
        return cls(**values)


def default_config() -> RpcConfig:
    """The configuration used when none is given: defaults plus environment."""
    return RpcConfig.from_env()
