"""The server's side of shared memory: its mappings of clients' segments.

See :mod:`pyg_dist.rpc.shm` for the whole scheme.
"""

from __future__ import annotations

import collections
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
    OWNERLESS_MAX_BYTES,
    SERVER_MAX_BYTES,
    SERVER_MAX_SEGMENTS,
    SHM_DIR,
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
        max_ownerless_bytes: Most payload bytes mapped at once of segments
            whose owner is not known: a client in another pid namespace, or
            one that names no pid. Their pages would stay pinned after their
            client exited until pushed out, so they have a bound of their own.

    A client that names its process id (``pid`` with ``pid_ns``, this
    server's pid namespace) must map the segment: that process is checked
    (``/proc/PID/maps``) before the mapping is kept, so a segment is
    unmapped once its real owner exits; naming another process is refused.
    """

    def __init__(self, max_bytes: int = SERVER_MAX_BYTES,
                 max_segments: int = SERVER_MAX_SEGMENTS,
                 max_ownerless_bytes: int = OWNERLESS_MAX_BYTES) -> None:
        self.max_bytes = int(max_bytes)
        self.max_segments = int(max_segments)
        self._lock = threading.Lock()
        # name -> (mapping, payload bytes, token)
        self._maps: collections.OrderedDict[str, tuple[mmap.mmap, int, bytes]] = \
            collections.OrderedDict()
        self.max_ownerless_bytes = min(int(max_ownerless_bytes), self.max_bytes)
        self._owners: dict[str, int] = {}  # name -> the client's process id
        self._bytes = 0
        self._ownerless_bytes = 0  # of segments whose owner cannot be known

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
        path = os.path.join(SHM_DIR, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError as exc:
            raise SharedMemoryError(f"cannot open {path} ({exc.strerror}): the client is not "
                                    f"on this host, or cannot share its /dev/shm") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != HEADER_BYTES + size:
                raise SharedMemoryError(f"{path} is not a segment of {size} bytes")
            # Only a private file of our own user with no other name: nobody
            # else can keep it open and truncate it under us (SIGBUS).
            if st.st_uid != os.geteuid() or st.st_mode & 0o077 or st.st_nlink != 1:
                raise SharedMemoryError(f"{path} must belong to this server's user, have "
                                        f"mode 0600 and one link")
            mm = mmap.mmap(fd, HEADER_BYTES + size)
        except OSError as exc:
            raise SharedMemoryError(f"cannot map {path}: {exc}") from exc
        finally:
            os.close(fd)
        if not hmac.compare_digest(mm[:TOKEN_BYTES], expected):
            mm.close()
            raise SharedMemoryError(f"{path} does not hold the token the client sent: not "
                                    f"the same memory")
        owner = _claimed_owner(spec)
        if owner is not None and not _maps_path(owner, path):
            # A client naming another live process as the owner would have
            # its segments outlive it (they are unmapped when the owner
            # exits): refused, and its file removed (it knew the token).
            mm.close()
            _unlink_quietly(path)
            raise SharedMemoryError(f"process {owner}, named as the owner of {path}, does "
                                    f"not map it: send the client's own pid, or none")
        # Mapped: the name has done its job. Unlinking it here, not only when
        # the client sees the reply, leaves no file behind a client killed
        # while its first request was in flight. A segment lent to several
        # servers at once (``keep``: pyg_dist.rpc.shm.outputs) stays until
        # all those its first batch asked have answered; its client unlinks
        # it then.
        if spec.get("keep") is not True:
            _unlink_quietly(path)
        # A client that died without release leaves its pages allocated for as
        # long as they stay mapped here: every new mapping first drops those.
        self.release(self._dead_owners())
        entry = (mm, size, expected)
        with self._lock:
            if name in self._maps:  # two first requests raced: one mapping is enough
                return self._maps[name]
            self._maps[name] = entry
            if owner is not None:
                self._owners[name] = owner
            else:
                self._ownerless_bytes += size
            self._bytes += size
            while self._maps and (self._bytes > self.max_bytes
                                  or len(self._maps) > self.max_segments):
                self._unmap(next(iter(self._maps)), "over the server's bound")
            while self._ownerless_bytes > self.max_ownerless_bytes:
                self._unmap(next(n for n in self._maps if n not in self._owners),
                            "over the bound of segments without a known owner")
        logger.debug("mapped segment %s (%d bytes)", name, size)
        return entry

    def _unmap(self, name: str, why: str) -> None:
        """Forgets one mapping (under the lock)."""
        _, size, _ = self._maps.pop(name)
        if self._owners.pop(name, None) is None:
            self._ownerless_bytes -= size
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
            self._bytes = self._ownerless_bytes = 0


def _claimed_owner(spec: dict[str, Any]) -> Optional[int]:
    """The process a request names as the segment's owner, or ``None`` when
    it names none this server can look up: a pid means something here only
    in our pid namespace (and no Linux pid reaches 2**22)."""
    owner = spec.get("pid")
    if isinstance(owner, int) and not isinstance(owner, bool) and 0 < owner < 1 << 22 \
            and spec.get("pid_ns") == pid_namespace() is not None:
        return owner
    return None


def _maps_path(pid: int, path: str) -> bool:
    """Whether process ``pid`` maps the file ``path`` (``/proc/PID/maps``;
    a file unlinked since shows as ``path (deleted)``)."""
    wanted = {path.encode(), path.encode() + b" (deleted)"}
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            for line in maps:
                fields = line.rstrip(b"\n").split(maxsplit=5)
                if len(fields) == 6 and fields[5] in wanted:
                    return True
    except OSError:  # gone, or not ours to read: not shown to map it
        return False
    return False


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


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
