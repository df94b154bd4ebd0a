"""Segment files under ``/dev/shm``: naming, creating, laying out, viewing.

See :mod:`pyg_dist.rpc.shm` for how segments are lent and served.
"""

from __future__ import annotations

import logging
import mmap
import multiprocessing.util
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import SharedMemoryError

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
OWNERLESS_MAX_BYTES = 512 << 20
"""Most bytes a server keeps mapped of segments whose owner it cannot check
(another pid namespace, no pid named): their pages stay pinned until pushed
out (:class:`~pyg_dist.rpc.shm.attached.AttachedSegments`)."""


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
        # A process that exits without closing still removes the file: at
        # interpreter exit, and also at the exit of a multiprocessing child
        # (a DataLoader worker), which leaves by os._exit without running
        # atexit hooks (a weakref.finalize left the file of a worker's
        # unfinished batch in /dev/shm). A forked child that inherited the
        # object leaves the file to its creator.
        self._unlink_at_exit = multiprocessing.util.Finalize(
            self, _unlink, args=(self.path, os.getpid()), exitpriority=0)
        self.payload = torch.frombuffer(self._map, dtype=torch.uint8, offset=HEADER_BYTES,
                                        count=self.size)

    @property
    def mapping(self) -> Any:
        """The ``mmap`` of header and payload (``None`` once closed)."""
        return self._map

    @property
    def key(self) -> list[str]:
        """``[name, token]``: what names the segment to its server."""
        return [self.name, self.token.hex()]

    def spec(self, drop: Sequence[Sequence[str]] = ()) -> dict[str, Any]:
        """The ``shm`` argument of a request that uses this segment;
        ``drop``: keys of segments the server should unmap."""
        spec: dict[str, Any] = {"name": self.name, "token": self.token.hex()}
        if not self.announced:
            spec.update(size=self.size, pid=os.getpid(), pid_ns=pid_namespace())
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


def room_for(size: int) -> bool:
    """Whether ``/dev/shm`` keeps three quarters of its free space after a
    segment of ``size`` bytes: others need it too (NCCL, DataLoader
    workers), and a container's is often only 64 MiB."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return False
    return size <= st.f_bavail * st.f_frsize // 4


_HOST: list[Optional[str]] = []


def pid_namespace() -> Optional[str]:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def this_host() -> Optional[str]:
    if not _HOST:
        _HOST.append(host_id())
    return _HOST[0]
