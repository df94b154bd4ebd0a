"""``pyg-dist serve``: serve one or several parts of a partitioned dataset.

A server host needs only ``ROOT/meta.json``, the partition book(s) and the
``part-K/`` directories of the parts it serves; the other parts' files are
neither read nor checked.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

# Byte limits a server takes from the command line: above 1 TiB no request
# or reply fits in memory anyway, and libzmq's int64 options overflow near
# 2**62 (MAXMSGSIZE is set to twice the request limit).
MAX_BYTES_OPTION = 1 << 40
# How long a stopping server waits for operations in flight: the process
# exits right after (os._exit), and their replies would find no socket. A
# launcher's SIGTERM is answered within 2 s even under load.
_STOP_TIMEOUT_S = 0.5
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_*")


def bind_endpoint(text: str) -> str:
    """Checks a ``--bind`` value and normalises it to ``tcp://HOST:PORT``.

    Accepts ``tcp://HOST:PORT`` and ``HOST:PORT``; HOST is a name, an IPv4
    address, ``*`` (every interface) or a bracketed IPv6 address, PORT an
    integer in ``[0, 65535]`` (0: any free port).

    Raises:
        argparse.ArgumentTypeError: naming what is wrong (argparse prints a
            usage error and exits with status 2).
    """
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme != "tcp":
        raise argparse.ArgumentTypeError(
            f"only tcp:// endpoints are served; give tcp://HOST:PORT or HOST:PORT, "
            f"not {scheme[:32]}://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError("expected HOST:PORT or tcp://HOST:PORT, e.g. "
                                         "tcp://0.0.0.0:5555 (port 0: any free port)")
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"port must be an integer in [0, 65535] (0: any free port), got {port[:32]!r}")
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{host[:64]!r} is not an IPv6 address") \
                from exc
    elif len(host) > 253 or not set(host) <= _HOST_CHARS:
        raise argparse.ArgumentTypeError(
            f"host {host[:64]!r} is not a host name, an IPv4 address, * or [IPv6]")
    return f"tcp://{host}:{int(port)}"


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``[low, high]``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:32]!r}") \
                from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must lie in [{low}, {high}], got {value}")
        return value
    parse.__name__ = "integer"
    return parse


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def part_list(text: str) -> list[int]:
    """An argparse type: ``K`` or a comma-separated list ``K,L,...`` of
    distinct parts, each in ``[0, 2**15)``."""
    one = int_in(0, (1 << 15) - 1)
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected K or K,L,... (e.g. 0,1), got {text[:64]!r}")
    parts = [one(item) for item in items]
    if len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(f"a part is listed twice in {text[:64]!r}")
    return parts


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Registers ``pyg-dist serve``."""
    p = sub.add_parser(
        "serve",
        help="serve one or several parts of a partitioned dataset over ZeroMQ",
        description=(
            "Loads part K of ROOT (or parts K,L,... in one process, each on its own "
            "endpoint) and serves sampling and feature requests until SIGTERM "
            "or Ctrl-C. Prints one line 'ready ENDPOINT [ENDPOINT...]' on stdout once it "
            "serves, in the order of the parts (with the real ports when --bind uses port "
            "0). Only ROOT/meta.json, the partition book and the served parts' part-K/ "
            "directories need to exist on this host. Limits and deadlines come from "
            "PYG_DIST_* environment variables (see docs/wire-protocol.md). It keeps big "
            "reply buffers in the heap (glibc mallopt; PYG_DIST_TUNE_MALLOC=0 turns that "
            "off, see docs/performance.md)."))
    p.add_argument("root", help="the partitioned dataset (directory with meta.json)")
    p.add_argument("--part", type=part_list, required=True, metavar="K[,L...]",
                   help="the part to serve, or a comma-separated list of parts")
    p.add_argument("--bind", type=bind_endpoint, default="tcp://127.0.0.1:0",
                   help="endpoint to bind, tcp://HOST:PORT or HOST:PORT, port in 0..65535 "
                        "(default: %(default)s; port 0 = any free); with several parts, "
                        "part i of the list gets PORT + i (or a free port each with 0)")
    p.add_argument("--feature-store", default="memory",
                   help="feature-store plugin (default: %(default)s; see 'pyg-dist plugins')")
    p.add_argument("--graph-store", default="memory",
                   help="graph-store plugin (default: %(default)s)")
    p.add_argument("--workers", type=int_in(0, 1024), default=None,
                   help="worker threads serving requests; 0 serves inline on the I/O thread "
                        "(default: PYG_DIST_WORKERS or 4)")
    p.add_argument("--threads", type=int_in(1, 4096), default=None,
                   help="torch threads per operation (intra-op); default: PYG_DIST_THREADS, "
                        "else the cores divided by the workers, so that workers running at "
                        "once do not oversubscribe the cores (which slows every request down "
                        "many times over)")
    p.add_argument("--max-message-bytes", type=int_in(1, MAX_BYTES_OPTION), default=None,
                   help="largest request accepted, in bytes, at most 2**40 (default: 64 MiB)")
    p.add_argument("--max-reply-bytes", type=int_in(1, MAX_BYTES_OPTION), default=None,
                   help="largest reply an operation may produce, in bytes, at most 2**40 "
                        "(default: 64 MiB)")
    p.add_argument("--client-receive-budget", type=int_in(1, MAX_BYTES_OPTION), default=None,
                   metavar="BYTES",
                   help="bytes libzmq may hold for one connection (unfinished or untaken "
                        "requests, handshake); a connection over it is cut (default: 128 MiB)")
    p.add_argument("--server-receive-budget", type=int_in(1, MAX_BYTES_OPTION), default=None,
                   metavar="BYTES",
                   help="the same for all connections together plus the requests queued "
                        "for workers; the biggest connections are cut first (default: 256 MiB)")
    p.add_argument("--client-reply-budget", type=int_in(1, MAX_BYTES_OPTION), default=None,
                   metavar="BYTES",
                   help="bytes held for one client's replies (computed, or being computed "
                        "with their working memory) before its requests are refused with "
                        "ServerBusyError; at least 4 x --max-reply-bytes (default: 256 MiB)")
    p.add_argument("--server-reply-budget", type=int_in(1, MAX_BYTES_OPTION), default=None,
                   metavar="BYTES",
                   help="the same for all clients together (default: 384 MiB)")
    p.add_argument("--handshake-timeout", type=float, default=None, metavar="SECONDS",
                   help="drop a connection that has not finished the ZeroMQ handshake "
                        "(greeting, CURVE) within this time (default: 10)")
    peers = p.add_mutually_exclusive_group()
    peers.add_argument("--peers", metavar="ADDRS", default=None,
                       help="the cluster's server list (host:port,... as PYG_DIST_SERVERS, "
                            "this server included): the server then samples a batch's hops "
                            "with its peers (sample_tree), one round trip per batch for the "
                            "trainer instead of one per hop. Off by default; peers are "
                            "reached on the first such request")
    peers.add_argument("--peers-file", metavar="FILE", default=None,
                       help="as --peers, from a file (the PYG_DIST_SERVERS_FILE format) read "
                            "on the first request that needs it, so a launcher can write it "
                            "once every server reported ready")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the sha256 check of the partition files while loading")
    p.add_argument("--read-only", action="store_true",
                   help="refuse every write: learnable embedding tables (pyg_dist."
                        "DistEmbedding) are served as loaded, never created or updated")
    p.add_argument("--embeddings-dir", metavar="DIR", default=None,
                   help="checkpoint the part's learnable embedding tables in DIR/part-K "
                        "(atomic, checksummed safetensors) and resume from there on start; "
                        "without it they live in memory only")
    p.add_argument("--checkpoint-every", type=seconds, default=60.0, metavar="SECONDS",
                   help="with --embeddings-dir: seconds between checkpoints while tables "
                        "change, 0 for only on stop (SIGTERM) (default: 60)")
    p.add_argument("--curve-secret-key", metavar="FILE", default=None,
                   help="serve with CURVE encryption using this '.key_secret' file "
                        "(made by 'pyg-dist keys')")
    p.add_argument("--curve-authorized-keys", metavar="DIR", default=None,
                   help="with --curve-secret-key: admit only clients whose public '.key' "
                        "file is in DIR")
    p.set_defaults(run=run)


def _config(args: argparse.Namespace):  # -> RpcConfig, imported lazily
    from pyg_dist.errors import RpcError
    from pyg_dist.rpc.config import RpcConfig

    # Options named as the RpcConfig fields they set; unset ones leave the
    # environment's (or the default) value.
    names = ("workers", "max_message_bytes", "max_reply_bytes", "client_receive_budget",
             "server_receive_budget", "client_reply_budget", "server_reply_budget",
             "handshake_timeout")
    overrides = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    if args.curve_authorized_keys and not args.curve_secret_key:
        raise RpcError("--curve-authorized-keys needs --curve-secret-key")
    config = RpcConfig.from_env(**overrides)
    if args.curve_secret_key:
        from pyg_dist.rpc.auth import server_config

        config = server_config(args.curve_secret_key, args.curve_authorized_keys, base=config)
    return config


def run(args: argparse.Namespace) -> int:
    """Loads the part, prints ``ready <endpoint>``, serves until signalled and
    exits the process with status 0 after a clean stop, or with status 1
    (the error on stderr) when the server stopped on its own failure."""
    from pyg_dist.errors import TransportError
    from pyg_dist.lifeline import watch_parent
    from pyg_dist.malloc_tuning import trim_heap, tune_malloc
    from pyg_dist.server.group import ServerGroup

    # First: a launcher that dies while the part loads leaves no server.
    watch_parent()
    config = _config(args)
    _set_threads(args.threads, config.workers * len(args.part))
    tune_malloc()  # before the server starts its threads
    group = ServerGroup(args.root, args.part, bind=args.bind,
                        feature_store=args.feature_store, graph_store=args.graph_store,
                        config=config, verify=not args.no_verify, peers=_peers(args),
                        read_only=args.read_only, embeddings_dir=args.embeddings_dir,
                        checkpoint_every=args.checkpoint_every)
    # Loading a part builds temporaries as big as its topology, which the
    # tuned allocator would keep resident for good: a host sized for the
    # server and its mapped part's hot pages would not hold them.
    trim_heap()
    # The ready line is the contract with launchers (LocalCluster, tests):
    # exactly "ready <endpoint> [<endpoint>...]", flushed at once.
    status = 0
    try:
        group.serve_forever(
            on_ready=lambda endpoints: print(f"ready {' '.join(endpoints)}", flush=True),
            stop_timeout=_STOP_TIMEOUT_S)
    except TransportError as exc:  # it stopped serving on its own: a failure
        print(f"pyg-dist serve: error: {exc}", file=sys.stderr)
        status = 1
    # Every socket is closed and every thread joined at this point. Tearing
    # down torch in interpreter finalisation still takes seconds on a busy
    # host, so leave at once: a stopped server should be gone, not lingering.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _peers(args: argparse.Namespace) -> Any:
    """The peer list of ``--peers``, or a reader of ``--peers-file`` (read
    when first needed), or ``None``."""
    if args.peers is not None:
        return args.peers
    if args.peers_file is None:
        return None
    from pyg_dist.discovery import SERVERS_FILE_ENV, server_groups

    path = args.peers_file
    return lambda: server_groups(None, environ={SERVERS_FILE_ENV: path})


def _set_threads(threads: int | None, workers: int) -> None:
    """Caps torch's intra-op threads of this process.

    Every worker runs torch ops on its own. On a 16-core host with two
    servers and a trainer all at torch's default (all cores per op), the
    synchronous loader ran 8x slower than with every process at 4 threads,
    their OpenMP teams spinning against each other. (That was every process
    capped; with the trainer capped, 1, 2 or 4 threads per server op moved
    the figures less than their noise.)
    """
    import torch

    from pyg_dist.errors import PygDistError

    if threads is None and os.environ.get("PYG_DIST_THREADS"):
        try:
            threads = int(os.environ["PYG_DIST_THREADS"])
        except ValueError as exc:
            raise PygDistError(f"PYG_DIST_THREADS must be an int, got "
                               f"{os.environ['PYG_DIST_THREADS']!r}") from exc
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // max(1, workers))
    if threads < 1:
        raise PygDistError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    logging.getLogger(__name__).info("torch intra-op threads: %d", threads)
