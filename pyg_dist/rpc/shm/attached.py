"""The server's side of shared memory: its mappings of clients' segments.

See :mod:`pyg_dist.rpc.shm` for the whole scheme.
"""

from __future__ import annotations

import collections
import fcntl
import hmac
import logging
import mmap
import os
import stat
import threading
from collections.abc import Iterable
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import SharedMemoryError
from pyg_dist.rpc.shm.files import (
    HEADER_BYTES,
    NAME_PATTERN,
    SERVER_MAX_BYTES,
    SERVER_MAX_SEGMENTS,
    TOKEN_BYTES,
    pid_namespace,
)
from pyg_dist.rpc.wire_values import describe

logger = logging.getLogger(__name__)


class AttachedSegments:
    """A server's mappings of its clients' segments (thread-safe).

    Args:
        max_bytes: Most payload bytes mapped at once; the least recently
            used segment is unmapped beyond it (its client's next request
            naming it gets an error and falls back to the socket).
        max_segments: Most segments mapped at once.

    A segment is a client's sealed ``memfd``: the first request naming it
    gives the client's process id (in this server's pid namespace) and the
    descriptor, and the server opens it through ``/proc/PID/fd/FD``. So the
    named process holds it, and its segments are unmapped once it exits.
    Only memory sealed against shrinking is mapped (``F_SEAL_SHRINK``): no
    process can truncate it under a worker writing into it (``SIGBUS``).
    """

    def __init__(self, max_bytes: int = SERVER_MAX_BYTES,
                 max_segments: int = SERVER_MAX_SEGMENTS) -> None:
        self.max_bytes = int(max_bytes)
        self.max_segments = int(max_segments)
        self._lock = threading.Lock()
        # name -> (mapping, payload bytes, token)
        self._maps: collections.OrderedDict[str, tuple[mmap.mmap, int, bytes]] = \
            collections.OrderedDict()
        self._owners: dict[str, int] = {}  # name -> the client's process id
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._maps)

    def payload(self, spec: Any, nbytes: int) -> Tensor:
        """The payload of the segment a request's ``shm`` argument names,
        mapped on first use, checked to hold ``nbytes``.

        Raises:
            SharedMemoryError: if the argument is malformed, the segment
                cannot be opened or its size or token differ, it is no longer
                mapped, or ``nbytes`` do not fit.
        """
        if not isinstance(spec, dict):
            raise SharedMemoryError(f"header field 'shm' must be a map with a segment 'name' "
                                    f"and 'token', got {describe(spec)}")
        name, token = _key([spec.get("name"), spec.get("token")], "'shm'")
        self.release(_keys(spec.get("drop", []), "'shm.drop'"))
        with self._lock:
            entry = self._maps.get(name)
            if entry is not None:
                self._maps.move_to_end(name)
        if entry is None:
            if "size" not in spec:
                raise SharedMemoryError(f"segment {name} is not mapped here (the server "
                                        f"restarted or unmapped it); send the request again "
                                        f"without it")
            entry = self._attach(name, token, spec)
        elif not hmac.compare_digest(entry[2], token):
            raise SharedMemoryError(f"the token sent for segment {name} is not its own")
        mm, size, _ = entry
        if nbytes > size:
            raise SharedMemoryError(f"the reply takes {nbytes} bytes, segment {name} holds "
                                    f"{size}")
        return torch.frombuffer(mm, dtype=torch.uint8, offset=HEADER_BYTES, count=size)

    def _attach(self, name: str, expected: bytes, spec: dict[str, Any]
                ) -> tuple[mmap.mmap, int, bytes]:
        size = spec.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= self.max_bytes:
            raise SharedMemoryError(f"'shm.size' must be an int in [1, {self.max_bytes}], "
                                    f"got {describe(size)}")
        owner, fd_number = _claimed_owner(spec), spec.get("fd")
        if owner is None:
            raise SharedMemoryError(f"segment {name} names no process of this server's pid "
                                    f"namespace ('shm.pid', 'shm.pid_ns'): the server opens a "
                                    f"segment through its client's /proc/PID/fd; send the "
                                    f"request without 'shm'")
        if not isinstance(fd_number, int) or isinstance(fd_number, bool) \
                or not 0 <= fd_number < 1 << 30:
            raise SharedMemoryError(f"'shm.fd' must be the client's descriptor of the segment, "
                                    f"got {describe(fd_number)}")
        path = f"/proc/{owner}/fd/{fd_number}"
        fd = _open_segment(path, name, owner)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != HEADER_BYTES + size:
                raise SharedMemoryError(f"{path} is not a segment of {size} bytes")
            if st.st_uid != os.geteuid() or st.st_nlink != 0:
                raise SharedMemoryError(f"{path} must be anonymous memory (memfd) of this "
                                        f"server's user")
            # Sealed against shrinking, nobody (its client included) can
            # truncate it under a worker writing into it: SIGBUS, which no
            # Python code can catch, would stop the whole server.
            if not _seals(fd) & fcntl.F_SEAL_SHRINK:
                raise SharedMemoryError(f"segment {name} is not sealed against shrinking "
                                        f"(memfd with F_SEAL_SHRINK): not mapped")
            mm = mmap.mmap(fd, HEADER_BYTES + size)
        except OSError as exc:
            raise SharedMemoryError(f"cannot map {path}: {exc}") from exc
        finally:
            os.close(fd)
        if not hmac.compare_digest(mm[:TOKEN_BYTES], expected):
            mm.close()
            raise SharedMemoryError(f"{path} does not hold the token the client sent: not "
                                    f"the same memory")
        # A client that died without release leaves its pages allocated for as
        # long as they stay mapped here: every new mapping first drops those.
        self.release(self._dead_owners())
        entry = (mm, size, expected)
        with self._lock:
            if name in self._maps:  # two first requests raced: one mapping is enough
                return self._maps[name]
            self._maps[name] = entry
            self._owners[name] = owner
            self._bytes += size
            while self._maps and (self._bytes > self.max_bytes
                                  or len(self._maps) > self.max_segments):
                self._unmap(next(iter(self._maps)), "over the server's bound")
        logger.debug("mapped segment %s (%d bytes) of process %d", name, size, owner)
        return entry

    def _unmap(self, name: str, why: str) -> None:
        """Forgets one mapping (under the lock)."""
        _, size, _ = self._maps.pop(name)
        self._owners.pop(name, None)
        self._bytes -= size
        logger.debug("unmapped segment %s: %s", name, why)

    def _dead_owners(self) -> list[tuple[str, bytes]]:
        """Segments whose client process no longer exists (the client is on
        this host, so its process id is ours to look up)."""
        with self._lock:
            owners = list(self._owners.items())
        dead = []
        with self._lock:
            for name, pid in owners:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    entry = self._maps.get(name)
                    if entry is not None:
                        dead.append((name, entry[2]))
                except (OSError, OverflowError):  # alive, or not ours to tell
                    pass
        if dead:
            logger.info("unmapping %d segments of clients that exited", len(dead))
        return dead

    def release(self, keys: Iterable[tuple[str, bytes]]) -> int:
        """Unmaps the segments of ``(name, token)`` keys; unknown names and
        wrong tokens are ignored. Returns how many were unmapped."""
        done = 0
        with self._lock:
            for name, token in keys:
                entry = self._maps.get(name)
                if entry is None or not hmac.compare_digest(entry[2], token):
                    continue
                self._unmap(name, "released")
                done += 1
        # A worker may still be writing into one: the mapping closes when its
        # last view is gone (mmap objects unmap when collected).
        return done

    def close(self) -> None:
        """Unmaps everything."""
        with self._lock:
            self._maps.clear()
            self._owners.clear()
            self._bytes = 0


def _claimed_owner(spec: dict[str, Any]) -> Optional[int]:
    """The process a request names as the segment's owner, or ``None`` when
    it names none this server can look up: a pid means something here only
    in our pid namespace (and no Linux pid reaches 2**22)."""
    owner = spec.get("pid")
    if isinstance(owner, int) and not isinstance(owner, bool) and 0 < owner < 1 << 22 \
            and spec.get("pid_ns") == pid_namespace() is not None:
        return owner
    return None


def _open_segment(path: str, name: str, owner: int) -> int:
    """Opens the client's descriptor ``path`` (``/proc/PID/fd/FD``) if it is
    the memfd ``name``; the caller checks what it opened.

    Its link must read ``/memfd:NAME (deleted)`` before it is opened, so a
    request naming another process, or another descriptor, opens nothing
    (a client could still swap the descriptor in between: it then gets a
    file it can open itself, which the checks after refuse; ``O_NONBLOCK``
    and ``O_NOCTTY`` keep a FIFO or a terminal from blocking or adopting us).
    """
    try:
        target = os.readlink(path)
    except OSError as exc:
        raise SharedMemoryError(f"cannot open segment {name} through {path} "
                                f"({exc.strerror}): the client is not a process of this "
                                f"host and user, or has let go of it") from exc
    if target != f"/memfd:{name} (deleted)":
        raise SharedMemoryError(f"cannot open segment {name}: process {owner}, named as its "
                                f"owner, does not hold it at {path}; send the client's own "
                                f"pid and descriptor")
    try:
        return os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SharedMemoryError(f"cannot open segment {name} through {path} "
                                f"({exc.strerror})") from exc


def _seals(fd: int) -> int:
    """The seals of ``fd``; ``0`` for a file that cannot have any."""
    try:
        return fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:  # not shared memory (EINVAL)
        return 0


def _key(value: Any, what: str) -> tuple[str, bytes]:
    """A ``[name, token]`` from the wire, checked: the name and the token."""
    if not isinstance(value, (list, tuple)) or len(value) != 2 \
            or not all(isinstance(v, str) for v in value):
        raise SharedMemoryError(f"{what} must name a segment and give its token "
                                f"([name, token] strings), got {describe(value)}")
    name, token = value
    if not NAME_PATTERN.fullmatch(name):
        raise SharedMemoryError(f"segment name {describe(name)} does not match "
                                f"{NAME_PATTERN.pattern}")
    if len(token) != 2 * TOKEN_BYTES:
        raise SharedMemoryError(f"a segment token is {2 * TOKEN_BYTES} hex digits")
    try:
        return name, bytes.fromhex(token)
    except ValueError as exc:
        raise SharedMemoryError("a segment token must be hex digits") from exc


def _keys(value: Any, what: str) -> list[tuple[str, bytes]]:
    """A list of ``[name, token]`` keys from the wire, checked."""
    if not isinstance(value, list) or len(value) > SERVER_MAX_SEGMENTS:
        raise SharedMemoryError(f"{what} must be a list of at most {SERVER_MAX_SEGMENTS} "
                                f"[name, token] pairs, got {describe(value)}")
    return [_key(v, what) for v in value]


def release_keys(value: Any) -> list[tuple[str, bytes]]:
    """The ``segments`` argument of a ``release`` request, checked."""
    return _keys(value, "argument 'segments'")
