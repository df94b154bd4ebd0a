"""Segments: sealed anonymous memory (``memfd``), naming, laying out, viewing.

See :mod:`pyg_dist.rpc.shm` for how segments are lent and served.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import re
import secrets
import socket
import time
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import SharedMemoryError

logger = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
"""Where segment files of earlier versions lay (segments are ``memfd`` now:
no file); :func:`remove_stale_segments` clears what those left."""
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
# A segment file (of an earlier version) older than this was left by a
# client killed before any server mapped it.
STALE_AFTER_S = 3600.0
# A server keeps at most this many bytes and segments of its clients mapped.
SERVER_MAX_BYTES = 8 << 30
SERVER_MAX_SEGMENTS = 1024
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
"""A segment's seals: its size is fixed for good, so no process (its client
included) can truncate it under a server writing into it (``SIGBUS``)."""


def host_id() -> Optional[str]:
    """An identity of what processes need to share segments, equal for
    those that can; ``None`` where they cannot (no ``memfd``, no ``/proc``).

    Kernel boot id and host name tell machines apart; the pid namespace
    tells apart containers that share a kernel but not their processes: a
    server opens a segment through its client's ``/proc/PID/fd``, which a
    client in another pid namespace cannot name. Equal ids only make the
    client try; the checks of the first request decide.
    """
    if not hasattr(os, "memfd_create"):
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return None
    namespace = pid_namespace()
    if namespace is None:
        return None
    return f"{boot}/{socket.gethostname()}/{namespace}"


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
    itemsize = dtype.itemsize  # a tensor made to ask its element_size cost 3 us a call
    count = 1
    for s in shape:
        count *= int(s)
    nbytes = count * itemsize
    if offset < 0 or offset % itemsize or offset + nbytes > payload.numel():
        raise SharedMemoryError(f"region of {nbytes} bytes at offset {offset} does not fit "
                                f"a segment of {payload.numel()} bytes")
    flat = payload[offset:offset + nbytes].view(dtype)
    # Most regions are 1-D: one view op fewer (a few us on every reply tensor).
    return flat if len(shape) == 1 else flat.view(tuple(shape))


class Segment:
    """One client segment: sealed anonymous memory (``memfd``), mapped.

    It has no file: a server opens it through this process's descriptor
    (``/proc/PID/fd/FD``), which the segment keeps open until a server
    answered a request naming it (:meth:`announce`). Its memory goes back to
    the system when this process and every server mapping it let go, however
    this process ends: nothing can be left behind in ``/dev/shm``. Its size
    is sealed (:data:`SEALS`), so nobody can truncate it under a server.

    Args:
        size: Payload bytes (the header page comes on top).

    Attributes:
        fd: The descriptor servers open it through (sent in the first
            request naming it); ``None`` once one mapped it, or it closed.

    Raises:
        SharedMemoryError: if the memory cannot be made, sealed or its pages
            reserved (the machine's memory, or the cgroup's, is full).
    """

    def __init__(self, size: int) -> None:
        self.name = NAME_PREFIX + secrets.token_hex(16)
        self.size = int(size)
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.announced = False  # a server holds it mapped; the descriptor is closed
        self._closed = False
        self.pid = os.getpid()
        try:
            fd = os.memfd_create(self.name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except (OSError, AttributeError) as exc:
            raise SharedMemoryError(f"cannot create segment {self.name}: {exc}") from exc
        try:
            os.ftruncate(fd, HEADER_BYTES + self.size)
            # Pages reserved now: a full machine is a clean error here, not a
            # SIGBUS in a server later.
            os.posix_fallocate(fd, 0, HEADER_BYTES + self.size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
            self._map = mmap.mmap(fd, HEADER_BYTES + self.size)
        except OSError as exc:
            os.close(fd)
            raise SharedMemoryError(
                f"cannot reserve {HEADER_BYTES + self.size} bytes of shared memory: {exc}; "
                f"free memory or lower PYG_DIST_SHARED_MEMORY_BYTES") from exc
        self.fd: Optional[int] = fd
        self._map[:TOKEN_BYTES] = self.token
        self.payload = torch.frombuffer(self._map, dtype=torch.uint8, offset=HEADER_BYTES,
                                        count=self.size)

    @property
    def path(self) -> Optional[str]:
        """Where a server opens it (``/proc/PID/fd/FD``) until one mapped
        it; ``None`` after."""
        return None if self.fd is None else f"/proc/{self.pid}/fd/{self.fd}"

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
        spec.update(self.first_use())
        if drop:
            spec["drop"] = [list(key) for key in drop]
        return spec

    def first_use(self) -> dict[str, Any]:
        """What a server needs to open it (``size``, ``pid``, ``pid_ns``,
        ``fd``) while no server has mapped it; ``{}`` after."""
        fd = self.fd
        if self.announced or fd is None:
            return {}
        return {"size": self.size, "pid": self.pid, "pid_ns": pid_namespace(), "fd": fd}

    def announce(self) -> None:
        """A server answered a request naming it: it holds it mapped, so the
        descriptor goes (the mappings live on)."""
        if not self.announced:
            self.announced = True
            self._close_fd()

    def _close_fd(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None and os.getpid() == self.pid:  # a forked child's copy is its own
            os.close(fd)

    def close(self) -> None:
        """Lets go of the descriptor and the mapping.

        The mapping is not closed here: views of it may still be alive in
        other threads (``torch.frombuffer`` keeps the mmap object alive but
        does not pin its buffer, so ``mmap.close()`` would unmap memory they
        read). It unmaps when the last of them is collected.
        """
        if self._closed:
            return
        self._closed = True
        self._close_fd()
        self.payload = torch.empty(0, dtype=torch.uint8)
        self._map = None


def remove_stale_segments(max_age_s: float = STALE_AFTER_S) -> int:
    """Removes this user's segment files older than ``max_age_s``; returns
    how many.

    Segments are ``memfd`` now and leave no file; earlier versions made
    files in ``/dev/shm`` that a client killed before any server mapped
    them left behind.
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
    """Whether the machine keeps three quarters of its available memory
    after a segment of ``size`` bytes: the batches, the model and NCCL need
    it too."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return size <= int(line.split()[1]) * 1024 // 4
    except (OSError, ValueError, IndexError):
        pass
    return False


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
