"""Deadlines and limits of the RPC layer, in one place.

:class:`RpcConfig` is the only place where pyg-dist's RPC timeouts, size
limits, concurrency bounds and retry policy are defined. Every field a
deployment has reason to set can be overridden from the environment
(``PYG_DIST_TIMEOUT=5`` and so on, see :data:`ENV_VARS`), which lets an
operator tune a deployment without touching training scripts; the others
are set in code.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from pyg_dist.errors import RpcError

logger = logging.getLogger(__name__)

# A server charges a request its answer plus the working memory it needs
# while computing it (a sampling kernel: up to three times the answer again),
# so a client's reply budget must hold that much for the largest answer.
REPLY_WORK_FACTOR = 4

# Field name -> environment variable that overrides it. Five fields have
# none and are set in code only (RpcConfig(...)): max_in_flight, max_queued,
# inline_reply_bytes, retry_backoff and retry_backoff_max are internal bounds
# whose defaults hold for any deployment, and no documented experiment or
# deployment sets them (docs/configuration.md says why each other one stays).
ENV_VARS = {
    "timeout": "PYG_DIST_TIMEOUT",
    "connect_timeout": "PYG_DIST_CONNECT_TIMEOUT",
    "max_message_bytes": "PYG_DIST_MAX_MESSAGE_BYTES",
    "max_reply_bytes": "PYG_DIST_MAX_REPLY_BYTES",
    "reply_hwm": "PYG_DIST_REPLY_HWM",
    "workers": "PYG_DIST_WORKERS",
    "inline_bytes": "PYG_DIST_INLINE_BYTES",
    # Byte budgets against hostile peers (docs/reliability.md, "Bounds").
    "client_receive_budget": "PYG_DIST_CLIENT_RECEIVE_BUDGET",
    "reply_receive_budget": "PYG_DIST_REPLY_RECEIVE_BUDGET",
    "server_receive_budget": "PYG_DIST_SERVER_RECEIVE_BUDGET",
    "client_reply_budget": "PYG_DIST_CLIENT_REPLY_BUDGET",
    "server_reply_budget": "PYG_DIST_SERVER_REPLY_BUDGET",
    "handshake_timeout": "PYG_DIST_HANDSHAKE_TIMEOUT",
    "retries": "PYG_DIST_RETRIES",
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

# Variables earlier releases read, now set in code only: a deployment that
# still sets one is told once that it has no effect (not silently ignored).
DROPPED_ENV_VARS = {"PYG_DIST_" + field.upper(): field for field in (
    "max_in_flight", "max_queued", "inline_reply_bytes", "retry_backoff", "retry_backoff_max")}
_told: set[str] = set()

# Byte sizes beyond this are typos, and overflow libzmq's int64 options.
MAX_BYTES = 1 << 40
_BYTE_FIELDS = ("max_message_bytes", "max_reply_bytes", "client_receive_budget",
                "reply_receive_budget",
                "server_receive_budget", "client_reply_budget", "server_reply_budget",
                "inline_bytes", "inline_reply_bytes", "shared_memory_bytes")

# The floor of the default reply receive bound (see reply_receive_limit).
_MIN_REPLY_RECEIVE = 64 << 20

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
            ``MAXMSGSIZE`` (which limits one frame) is set to this value, so
            libzmq drops the connection of a peer announcing a bigger frame
            before it buffers it.
        max_reply_bytes: Largest reply a server's operations produce; a
            request whose answer would be bigger (e.g. ``sample`` with a huge
            fan-out, ``get`` of too many rows) is refused before anything is
            allocated. A server reports it in ``meta``; the trainer's feature
            store splits a ``get`` whose answer would be bigger.
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
        client_receive_budget: Bytes libzmq may hold for one connection of
            a server: an unfinished multipart message, a handshake, requests
            received but not yet taken by the server. A connection over it is
            cut (its peer sees the connection drop). Counted in bytes on the
            wire, so at least ``max_message_bytes``.
        server_receive_budget: The same, summed over every connection of a
            server, plus the requests queued for its workers; over it the
            connection holding the most is cut first.
        reply_receive_budget: Bytes libzmq may hold for one server's
            replies on a client (a trainer, or a server forwarding hops to
            its peers): an unfinished reply, replies not yet taken. A
            connection over it is cut and the calls awaiting that server fail
            with a ``ProtocolError`` naming it (:mod:`pyg_dist.rpc.reply_guard`).
            ``0`` (the default): twice ``max_reply_bytes``, at least 64 MiB. Else at least
            ``max_reply_bytes``, and at least the servers' own
            ``max_reply_bytes`` for their biggest replies to get through.
        client_reply_budget: Bytes a server holds for one client's replies:
            an answer being computed is charged its size plus the working
            memory of the computation, a computed one its size until libzmq
            has handed it to the kernel. A request that would go over it is
            refused with a ``ServerBusyError`` reply. At least
            ``REPLY_WORK_FACTOR`` (4) times ``max_reply_bytes``.
        server_reply_budget: The same, summed over every client.
        inline_reply_bytes: Requests whose answer may exceed this many bytes
            are served by a worker however small the request: a tiny request
            with a huge answer must not hold up the I/O thread.
        handshake_timeout: Seconds a new connection has to finish the ZeroMQ
            handshake (greeting, CURVE authentication) before a server drops
            it (libzmq's ``ZMQ_HANDSHAKE_IVL``).
        retries: How often :class:`~pyg_dist.rpc.retrying.RetryingClient`
            re-sends a call of a retry-safe op that timed out or lost its
            server, once every replica of its part failed (``0``: with one
            server a part, every call stays within its single deadline).
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
            reply over the socket. See :mod:`pyg_dist.rpc.shm`.
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
    max_message_bytes: int = 64 << 20
    max_reply_bytes: int = 64 << 20
    reply_hwm: int = 2048
    max_in_flight: int = 1024
    workers: int = 4
    inline_bytes: int = 16 << 10
    max_queued: int = 4096
    client_receive_budget: int = 128 << 20
    reply_receive_budget: int = 0
    server_receive_budget: int = 256 << 20
    client_reply_budget: int = 256 << 20
    server_reply_budget: int = 384 << 20
    inline_reply_bytes: int = 1 << 20
    handshake_timeout: float = 10.0
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
                    "max_in_flight", "max_queued", "client_receive_budget",
                    "server_receive_budget", "client_reply_budget", "server_reply_budget",
                    "handshake_timeout")
        for name in positive:
            if not getattr(self, name) > 0:
                raise RpcError(f"RpcConfig.{name} must be > 0, got "
                               f"{getattr(self, name)!r}")
        for name in ("retries", "retry_backoff", "retry_backoff_max", "workers",
                     "reply_receive_budget",
                     "inline_bytes", "shared_memory_bytes", "inline_reply_bytes",
                     "heartbeat_interval", "reconnect_grace"):
            if getattr(self, name) < 0:
                raise RpcError(f"RpcConfig.{name} must be >= 0, got "
                               f"{getattr(self, name)!r}")
        # ZMTP carries the time-to-live in a 16-bit count of 0.1 s.
        if not self.heartbeat_interval < self.heartbeat_timeout <= MAX_HEARTBEAT_TIMEOUT:
            raise RpcError(f"RpcConfig.heartbeat_timeout must exceed heartbeat_interval "
                           f"({self.heartbeat_interval!r}) and be at most "
                           f"{MAX_HEARTBEAT_TIMEOUT} seconds, got {self.heartbeat_timeout!r}")
        for name in _BYTE_FIELDS:
            if getattr(self, name) > MAX_BYTES:
                raise RpcError(f"RpcConfig.{name} must be at most 2**40 bytes, got "
                               f"{getattr(self, name)!r}")
        self._check_budgets()

    def _check_budgets(self) -> None:
        """A budget below the limit it must hold could refuse valid traffic."""
        pairs = (("client_receive_budget", "max_message_bytes", 1),
                 ("server_receive_budget", "client_receive_budget", 1),
                 ("client_reply_budget", "max_reply_bytes", REPLY_WORK_FACTOR),
                 ("server_reply_budget", "client_reply_budget", 1))
        if self.reply_receive_budget:
            pairs += (("reply_receive_budget", "max_reply_bytes", 1),)
        for budget, limit, factor in pairs:
            if getattr(self, budget) < factor * getattr(self, limit):
                times = f"{factor} x " if factor > 1 else ""
                raise RpcError(
                    f"RpcConfig.{budget} ({getattr(self, budget)}) must be at least "
                    f"{times}{limit} ({getattr(self, limit)}), or valid requests could "
                    f"be refused; raise {ENV_VARS[budget]} or lower {ENV_VARS[limit]}")

    @property
    def reply_receive_limit(self) -> int:
        """The bytes libzmq may hold for one server's replies on a client:
        ``reply_receive_budget``, or when that is 0 twice ``max_reply_bytes``
        and at least 64 MiB (a ``meta`` reply, with its partition books, is
        not bounded by ``max_reply_bytes``; a tiny limit set for a test must
        not cut it)."""
        return self.reply_receive_budget or max(2 * self.max_reply_bytes, _MIN_REPLY_RECEIVE)

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
        for var in DROPPED_ENV_VARS.keys() & environ.keys() - _told:
            _told.add(var)
            logger.warning("%s is no longer read by pyg-dist; set "
                           "RpcConfig(%s=...) in code if you need it", var,
                           DROPPED_ENV_VARS[var])
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
