"""Same-host shared memory for big replies: the client's segments, the server's mappings.

When a trainer and a partition server run on one machine, a ``get`` reply of
tens of MB crossing loopback TCP costs more CPU than gathering the rows did:
the server's kernel copies it into the socket, the trainer's kernel copies it
out again, and libzmq's I/O threads on both sides move it (about 20 core-ms
per 40 MB batch on two cores). Instead the trainer lends the server a segment
of shared memory and the server gathers the rows straight into it; the reply
carries only a header.

The trainer (client) owns every segment:

* :class:`SegmentPool` (one per server, per process) creates segments as
  files under ``/dev/shm`` with mode 0600, reserves their pages up front
  (``posix_fallocate``: a full ``/dev/shm`` is a clean error now, not a
  ``SIGBUS`` in the server later), and writes a random token into a header
  page. The first request that uses a segment names it, with its size and
  token; the server unlinks the file as soon as it has mapped it (and the
  trainer once it sees the answer), so only a client killed within that one
  round trip can leave a file, which the next client on the host removes
  after an hour (:func:`remove_stale_segments`). Segments are reused for later
  requests; at most ``limit_bytes`` of them exist per server.
* :class:`AttachedSegments` (one per server) opens a named segment, checks
  that its size and token are what the client said (it really is the same
  memory, on the same host), and keeps it mapped, least recently used first
  out beyond a bound. A client that discards a segment tells the server with
  the ``drop`` list of its next request, or the ``release`` op on close; the
  segments of a client process that exited without either are unmapped the
  next time the server maps a segment.

Nothing here is ever trusted from the wire without a check: names must match
:data:`NAME_PATTERN`, sizes and offsets must lie inside the mapping, and
every request (and every ``drop`` or ``release``) must carry the segment's
token, so knowing a name (``/dev/shm`` can be listed by anyone) is not
enough to make the server write into, or unmap, another client's memory.
The server maps only files of its own user, private to it (mode ``0600``),
with one link: no other user can hand it a file to truncate under it.
"""

from __future__ import annotations

import collections
import hmac
import logging
import mmap
import os
import re
import secrets
import socket
import stat
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import SharedMemoryError
from pyg_dist.rpc.wire_values import describe

logger = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
NAME_PREFIX = "pyg-dist-shm-"
NAME_PATTERN = re.compile(r"pyg-dist-shm-[0-9a-f]{32}")  # matched whole (fullmatch)
TOKEN_BYTES = 16
HEADER_BYTES = 4096  # the token; the payload starts on the next page
ALIGN = 64  # every region of a reply starts on a cache line

# Below this many reply bytes TCP is as quick and a segment not worth holding.
MIN_BYTES = 64 << 10
_GRANULE = 1 << 20
# Segments are made a quarter bigger than the request that creates them, so
# that the next batches' (slightly different) sizes fit into them too.
_HEADROOM = 1.25
# A server keeps at most this many bytes and segments of its clients mapped.
# A segment file older than this was left by a client killed before any
# server mapped it (mapping unlinks it).
STALE_AFTER_S = 3600.0
SERVER_MAX_BYTES = 8 << 30
SERVER_MAX_SEGMENTS = 1024


def host_id() -> Optional[str]:
    """An identity of this host's ``/dev/shm``, equal for processes that can
    share segments; ``None`` where there is no usable ``/dev/shm``.

    Kernel boot id and host name tell machines apart; the device number of
    ``/dev/shm`` tells apart containers that share a kernel but not their
    ``/dev/shm``. Equal ids only make the client try; the token check of the
    first request decides.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        st = os.stat(SHM_DIR)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not os.access(SHM_DIR, os.W_OK):
        return None
    return f"{boot}/{socket.gethostname()}/{st.st_dev}"


def layout(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Offsets of consecutive regions of ``sizes`` bytes, each aligned to
    :data:`ALIGN`, and the bytes they span together."""
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end += -(-int(size) // ALIGN) * ALIGN
    return offsets, end


def view(payload: Tensor, offset: int, dtype: torch.dtype, shape: Sequence[int]) -> Tensor:
    """A tensor of ``dtype`` and ``shape`` over ``payload`` (uint8) at ``offset``.

    Raises:
        SharedMemoryError: if the region does not lie inside ``payload`` or
            is not aligned to the dtype.
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = 1
    for s in shape:
        count *= int(s)
    nbytes = count * itemsize
    if offset < 0 or offset % itemsize or offset + nbytes > payload.numel():
        raise SharedMemoryError(f"region of {nbytes} bytes at offset {offset} does not fit "
                                f"a segment of {payload.numel()} bytes")
    return payload[offset:offset + nbytes].view(dtype).view(*shape)


class Segment:
    """One client segment: a file under ``/dev/shm``, mapped.

    Args:
        size: Payload bytes (the header page comes on top).

    Raises:
        SharedMemoryError: if the file cannot be created or its pages cannot
            be reserved (``/dev/shm`` full or missing).
    """

    def __init__(self, size: int) -> None:
        self.name = NAME_PREFIX + secrets.token_hex(16)
        self.size = int(size)
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.announced = False  # the server holds it mapped; the file is unlinked
        self._closed = False
        self.path = os.path.join(SHM_DIR, self.name)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise SharedMemoryError(f"cannot create {self.path}: {exc}") from exc
        try:
            os.posix_fallocate(fd, 0, HEADER_BYTES + self.size)
            self._map = mmap.mmap(fd, HEADER_BYTES + self.size)
        except OSError as exc:
            os.unlink(self.path)
            raise SharedMemoryError(
                f"cannot reserve {HEADER_BYTES + self.size} bytes in {SHM_DIR}: {exc}; "
                f"free space there or lower PYG_DIST_SHARED_MEMORY_BYTES") from exc
        finally:
            os.close(fd)
        self._map[:TOKEN_BYTES] = self.token
        # A process that exits without closing still removes the file (a
        # forked child that inherited the object leaves it to its creator).
        self._unlink_at_exit = weakref.finalize(self, _unlink, self.path, os.getpid())
        self.payload = torch.frombuffer(self._map, dtype=torch.uint8, offset=HEADER_BYTES,
                                        count=self.size)

    @property
    def key(self) -> list[str]:
        """``[name, token]``: what names the segment to its server."""
        return [self.name, self.token.hex()]

    def spec(self, drop: Sequence[Sequence[str]] = ()) -> dict[str, Any]:
        """The ``shm`` argument of a request that uses this segment;
        ``drop``: keys of segments the server should unmap."""
        spec: dict[str, Any] = {"name": self.name, "token": self.token.hex()}
        if not self.announced:
            spec.update(size=self.size, pid=os.getpid(), pid_ns=_pid_namespace())
        if drop:
            spec["drop"] = [list(key) for key in drop]
        return spec

    def announce(self) -> None:
        """The server answered a request naming it: unlink the file (the
        mappings live on), so that no crash can leave it behind."""
        if not self.announced:
            self.announced = True
            self._unlink_at_exit()

    def close(self) -> None:
        """Lets go of the mapping and removes the file if the server never
        took it.

        The mapping is not closed here: views of it may still be alive in
        other threads (``torch.frombuffer`` keeps the mmap object alive but
        does not pin its buffer, so ``mmap.close()`` would unmap memory they
        read). It unmaps when the last of them is collected.
        """
        if self._closed:
            return
        self._closed = True
        self._unlink_at_exit()  # if the server never took it (no-op otherwise)
        self.payload = torch.empty(0, dtype=torch.uint8)
        self._map = None


def _unlink(path: str, owner: Optional[int] = None) -> None:
    if owner is not None and owner != os.getpid():
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class SegmentPool:
    """A client's segments for one server (thread-safe).

    Args:
        limit_bytes: Most payload bytes of segments held at once; ``0``
            never lends any.
        address: The server, for messages.
    """

    def __init__(self, limit_bytes: int, address: str = "") -> None:
        self.limit_bytes = int(limit_bytes)
        self.address = address
        self.disabled: Optional[str] = None if limit_bytes > 0 else "disabled by configuration"
        self._lock = threading.Lock()
        self._free: list[Segment] = []
        self._all: set[Segment] = set()  # free and in use
        self._closed = False
        self._held = 0
        self._dropped: list[list[str]] = []  # keys of segments the server should unmap

    @property
    def held_bytes(self) -> int:
        """Payload bytes of the segments that exist now."""
        return self._held

    def acquire(self, nbytes: int) -> Optional[Segment]:
        """A segment of at least ``nbytes`` for one request, or ``None`` (use
        TCP): too small a reply, over the limit, a new segment would take
        more than a quarter of the free space of ``/dev/shm``, or shared
        memory failed."""
        if nbytes < MIN_BYTES or self.disabled is not None:
            return None
        with self._lock:
            fits = [s for s in self._free if s.size >= nbytes]
            if fits:
                segment = min(fits, key=lambda s: s.size)
                self._free.remove(segment)
                return segment
            size = -(-int(nbytes * _HEADROOM) // _GRANULE) * _GRANULE
            # Make room by giving up idle segments too small to serve.
            while self._held + size > self.limit_bytes and self._free:
                self._forget(self._free.pop(0))
            if self._held + size > self.limit_bytes or not _room_for(size):
                return None
            self._held += size
        try:
            segment = Segment(size)
        except SharedMemoryError as exc:
            with self._lock:
                self._held -= size
            self.disable(str(exc))
            return None
        with self._lock:
            closed = self._closed  # close() ran while it was made
            if not closed:
                self._all.add(segment)
            else:
                self._held -= size
        if closed:
            segment.close()
            return None
        return segment

    def release(self, segment: Segment) -> None:
        """Returns a segment whose request completed, for reuse."""
        with self._lock:
            if segment in self._all:  # not closed meanwhile
                self._free.append(segment)

    def discard(self, segment: Segment) -> None:
        """Gives up a segment whose request failed: the server may still
        write into it, so it is never reused."""
        with self._lock:
            if segment in self._all:
                self._forget(segment)

    def discard_idle(self) -> None:
        """Gives up every idle segment: the server lost one (it restarted),
        so it has probably lost the others too."""
        with self._lock:
            for segment in self._free:
                self._forget(segment)
            self._free = []

    def take_dropped(self) -> list[list[str]]:
        """Keys of segments given up since the last call, for the server to
        unmap (sent along with the next request)."""
        with self._lock:
            dropped, self._dropped = self._dropped, []
        return dropped

    def restore_dropped(self, keys: Sequence[Sequence[str]]) -> None:
        """Puts back keys taken for a request that failed: they still have
        to reach the server."""
        if keys:
            with self._lock:
                self._dropped.extend(list(k) for k in keys)

    def disable(self, reason: str) -> None:
        """Stops lending segments to this server (logged once)."""
        if self.disabled is None:
            self.disabled = reason
            logger.info("shared memory with %s off, replies travel over the socket: %s",
                        self.address, reason)

    def close(self) -> list[list[str]]:
        """Lets go of every segment and lends no more; returns the keys of
        those the server may still map (for a ``release`` call)."""
        with self._lock:
            for segment in list(self._all):
                self._forget(segment)
            self._free = []
            dropped, self._dropped = self._dropped, []
            self._closed = True
            self.disabled = self.disabled or "closed"
        return dropped

    def _forget(self, segment: Segment) -> None:
        self._all.discard(segment)
        self._held -= segment.size
        # Also a segment never confirmed: the server may have mapped it
        # before its request failed (an unknown name costs it nothing).
        self._dropped.append(segment.key)
        segment.close()


class AttachedSegments:
    """A server's mappings of its clients' segments (thread-safe).

    Args:
        max_bytes: Most payload bytes mapped at once; the least recently
            used segment is unmapped beyond it (its client's next request
            naming it gets an error and falls back to the socket).
        max_segments: Most segments mapped at once.
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
            raise SharedMemoryError(f"argument 'shm' must be a map with a segment 'name' "
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
        # Mapped: the name has done its job. Unlinking it here, not only when
        # the client sees the reply, leaves no file behind a client killed
        # while its first request was in flight.
        try:
            os.unlink(path)
        except OSError:
            pass
        # A client that died without release leaves its pages allocated for as
        # long as they stay mapped here: every new mapping first drops those.
        self.release(self._dead_owners())
        owner = spec.get("pid")
        entry = (mm, size, expected)
        with self._lock:
            if name in self._maps:  # two first requests raced: one mapping is enough
                return self._maps[name]
            self._maps[name] = entry
            # A process id means something here only in our pid namespace
            # (and no Linux pid reaches 2**22).
            if isinstance(owner, int) and not isinstance(owner, bool) and 0 < owner < 1 << 22 \
                    and spec.get("pid_ns") == _pid_namespace() is not None:
                self._owners[name] = owner
            self._bytes += size
            while self._maps and (self._bytes > self.max_bytes
                                  or len(self._maps) > self.max_segments):
                old, (_, old_size, _) = self._maps.popitem(last=False)
                self._owners.pop(old, None)
                self._bytes -= old_size
                logger.debug("unmapped segment %s: over the server's bound", old)
        logger.debug("mapped segment %s (%d bytes)", name, size)
        return entry

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
                del self._maps[name]
                self._owners.pop(name, None)
                self._bytes -= entry[1]
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


class ClientSegments:
    """One client process's segment pools, one per server, created on first
    use. Not for a forked child: its owner starts a new one there (the
    parent's segments are the parent's).

    Args:
        endpoints: The servers, by index.
        server_hosts: Each server's :func:`host_id` as it reported it
            (``None``: unknown); only servers on this host get segments.
        limit_bytes: Most bytes lent to each server (``0``: none).
    """

    def __init__(self, endpoints: Sequence[str], server_hosts: Sequence[Optional[str]],
                 limit_bytes: int) -> None:
        self.endpoints = list(endpoints)
        self.server_hosts = list(server_hosts)
        self.limit_bytes = int(limit_bytes)
        self._lock = threading.Lock()
        self._pools: dict[int, SegmentPool] = {}

    def pool(self, server: int) -> SegmentPool:
        """The pool of segments lent to ``server`` by this process."""
        with self._lock:
            pool = self._pools.get(server)
            if pool is None:
                if not self._pools and self.limit_bytes:
                    remove_stale_segments()
                here = _this_host()
                limit = self.limit_bytes if here is not None \
                    and self.server_hosts[server] == here else 0
                pool = self._pools[server] = SegmentPool(limit, self.endpoints[server])
                if self.limit_bytes and not limit:
                    pool.disabled = "the server runs on another host"
            return pool

    def close(self) -> dict[int, list[list[str]]]:
        """Closes this process's pools; returns, per server, the keys of
        segments it may still map (for its ``release`` op)."""
        with self._lock:
            pools, self._pools = self._pools, {}
        return {server: names for server, pool in pools.items() if (names := pool.close())}


def remove_stale_segments(max_age_s: float = STALE_AFTER_S) -> int:
    """Removes this user's segment files older than ``max_age_s``; returns
    how many.

    A segment's file lives only until a server maps it, a round trip after
    it is made; one much older belongs to a client killed in between.
    """
    removed = 0
    now = time.time()
    try:
        entries = list(os.scandir(SHM_DIR))
    except OSError:
        return 0
    for entry in entries:
        if not NAME_PATTERN.fullmatch(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if st.st_uid == os.getuid() and now - st.st_mtime > max_age_s:
                os.unlink(entry.path)
                removed += 1
        except OSError:  # gone meanwhile, or not ours to remove
            continue
    if removed:
        logger.info("removed %d stale shared memory segment files from %s", removed, SHM_DIR)
    return removed


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


def _room_for(size: int) -> bool:
    """Whether ``/dev/shm`` keeps three quarters of its free space after a
    segment of ``size`` bytes: others need it too (NCCL, DataLoader
    workers), and a container's is often only 64 MiB."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return False
    return size <= st.f_bavail * st.f_frsize // 4


_HOST: list[Optional[str]] = []


def _pid_namespace() -> Optional[str]:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _this_host() -> Optional[str]:
    if not _HOST:
        _HOST.append(host_id())
    return _HOST[0]
