"""Where a trainer finds its partition servers.

:func:`server_groups` turns what the user gave into endpoints, checked
before any socket exists, from the first of:

1. the ``addresses`` passed to :func:`pyg_dist.connect` (a list or a
   comma-separated string);
2. ``PYG_DIST_SERVERS``: comma-separated addresses (``pyg-dist launch`` sets
   it; on many hosts set it in the trainers' environment);
3. ``PYG_DIST_SERVERS_FILE``: a text file of addresses, separated by commas,
   blanks or new lines, ``#`` starting a comment (a Slurm job or a
   Kubernetes ConfigMap writes one; every trainer host reads it).

An address is ``tcp://host:port``, ``host:port`` (read as TCP) or
``ipc://path``; the order does not matter (servers say which part they
serve). Replicas of one part (:func:`server_groups`, what
:func:`pyg_dist.connect` reads) are joined by ``|``, e.g.
``PYG_DIST_SERVERS=a:5555|a2:5555,b:5555``, or given as a list. A bad entry
is a :class:`~pyg_dist.errors.ServerListError` that names its source (and
the file's line).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Optional, Union

from pyg_dist.errors import RpcError, ServerListError
from pyg_dist.rpc.client import normalize_endpoint

logger = logging.getLogger(__name__)

SERVERS_ENV = "PYG_DIST_SERVERS"
SERVERS_FILE_ENV = "PYG_DIST_SERVERS_FILE"

# A server list of a real cluster is a few KiB; anything much bigger is not
# one (a wrong path, a binary), and is refused before it is parsed.
MAX_FILE_BYTES = 1 << 20
MAX_SERVERS = 1 << 15


def server_groups(addresses: Union[Sequence[Union[str, Sequence[str]]], str, None] = None,
                  environ: Optional[dict[str, str]] = None) -> list[list[str]]:
    """The normalised server endpoints a trainer should connect to, per part:
    every entry is a server or a group of replicas of one part, given as a
    list (``[["a:1", "a2:1"], "b:1"]``) or joined by ``|``
    (``"a:1|a2:1,b:1"``, in the environment variable and the file too).

    Args:
        addresses: Explicit addresses (a list, or one comma-separated
            string); ``None`` reads the environment (see the module doc).
        environ: The environment to read (default: ``os.environ``).

    Returns:
        One list of distinct endpoints such as ``tcp://10.0.0.5:5555`` per
        part (a single one when the part has no replicas).

    Raises:
        ServerListError: if no list is given anywhere, the file cannot be
            read or is too big, the list is empty, an entry does not parse,
            an address repeats, or a replica group is empty.
    """
    items, source = _items(addresses, environ)
    members: list[tuple[object, Optional[int]]] = []
    sizes = []
    for entry, line in items:
        group = entry.split("|") if isinstance(entry, str) else \
            list(entry) if isinstance(entry, (list, tuple)) else [entry]
        if not group or any(isinstance(m, str) and not m.strip() for m in group):
            where = source if line is None else f"{source}, line {line}"
            raise ServerListError(f"a replica group in the server list ({where}) is empty "
                                  f"or has an empty member: {entry!r}; write "
                                  f"host:port|host2:port for the replicas of one part")
        members += [(m.strip() if isinstance(m, str) else m, line) for m in group]
        sizes.append(len(group))
    flat = _normalise(members, source)
    groups, start = [], 0
    for size in sizes:
        groups.append(flat[start:start + size])
        start += size
    return groups


def _items(addresses: object, environ: Optional[dict[str, str]]
           ) -> tuple[list[tuple[object, Optional[int]]], str]:
    """The raw entries of the first list found (see the module doc), each
    with its line in the file, and the list's source."""
    env = os.environ if environ is None else environ
    if addresses is not None:
        source = "pyg_dist.connect()"
        items = _split(addresses) if isinstance(addresses, str) else \
            [(str(a).strip() if isinstance(a, str) else a, None) for a in addresses]
    elif env.get(SERVERS_ENV, "").strip():
        source = SERVERS_ENV
        items = _split(env[SERVERS_ENV])
        if env.get(SERVERS_FILE_ENV):
            logger.info("%s is set; %s is ignored", SERVERS_ENV, SERVERS_FILE_ENV)
    elif env.get(SERVERS_FILE_ENV, "").strip():
        path = env[SERVERS_FILE_ENV].strip()
        source = f"{SERVERS_FILE_ENV}={path}"
        items = _split(_read(Path(path), source))
    else:
        raise ServerListError(
            f"no server addresses: pass them to pyg_dist.connect([...]), or set {SERVERS_ENV} "
            f"(comma-separated host:port, as pyg-dist launch does) or {SERVERS_FILE_ENV} (a "
            f"file of host:port entries separated by commas, blanks or new lines, # "
            f"starting a comment) in every trainer's environment")
    return items, source


def _read(path: Path, source: str) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ServerListError(f"cannot read the server list ({source}): "
                              f"{exc.strerror or exc}; write host:port entries there "
                              f"(separated by commas, blanks or new lines), "
                              f"or set {SERVERS_ENV} instead") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ServerListError(f"the server list ({source}) is over {MAX_FILE_BYTES} bytes; "
                              f"is it the right file?")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ServerListError(f"the server list ({source}) is not UTF-8 text (byte "
                              f"{exc.start}); is it the right file?") from exc


def _split(text: str) -> list[tuple[str, Optional[int]]]:
    """Entries with their line number (1-based), comments dropped."""
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        for entry in line.split("#", 1)[0].replace(",", " ").split():
            items.append((entry, number))
    return items


def _normalise(items: list[tuple[object, Optional[int]]], source: str) -> list[str]:
    if not items:
        raise ServerListError(f"the server list ({source}) is empty; give a host:port for "
                              f"each server (every part served once), separated by commas, "
                              f"blanks or new lines")
    if len(items) > MAX_SERVERS:
        raise ServerListError(f"the server list ({source}) has {len(items)} entries, more "
                              f"than {MAX_SERVERS} parts can exist")
    endpoints: list[str] = []
    seen: dict[str, str] = {}
    for entry, line in items:
        where = source if line is None or source == "pyg_dist.connect()" \
            else f"{source}, line {line}"
        try:
            endpoint = normalize_endpoint(entry)
        except RpcError as exc:
            raise ServerListError(f"{exc} (from {where})") from exc
        if endpoint in seen:
            raise ServerListError(f"server address {endpoint} repeats ({seen[endpoint]} "
                                  f"and {where}); list each server once")
        seen[endpoint] = where
        endpoints.append(endpoint)
    return endpoints
