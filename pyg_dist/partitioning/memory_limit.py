"""The memory limit of out-of-core partitioning: parsing ``--memory-limit``,
the default, and what is left for chunks once the process's own footprint and
the per-node state are counted.

The limit is on the peak RSS of the whole process (the interpreter and the
libraries included): the writer measures what the process already holds and
sizes every chunk from what remains. It starts no other process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional

from pyg_dist.errors import InvalidPartitionArgumentError, PartitionMemoryError

DEFAULT_FRACTION = 0.5
"""Share of the available memory used when no limit is given: the page cache
keeps the rest for the files being read and written."""
MIN_WORKING_BYTES = 8 << 20
"""Smallest working memory the passes accept: below it chunks get so small
that the per-chunk overhead of Python dominates."""

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"1536M"``, ``"4G"``, ``"4GiB"``, ``"1048576"`` -> bytes (powers of 1024).

    Raises:
        InvalidPartitionArgumentError: if ``text`` is not a size.
    """
    match = _SIZE.match(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidPartitionArgumentError(
            f"memory limit {text!r} is not a size; write e.g. 1536M, 4G or 4GiB")
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if value < 1:
        raise InvalidPartitionArgumentError(f"memory limit {text!r} must be positive")
    return int(value)


def available_memory() -> int:
    """``MemAvailable`` of ``/proc/meminfo`` (or the physical memory where
    there is none), in bytes."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_limit() -> int:
    """The limit used when none is given: :data:`DEFAULT_FRACTION` of the
    available memory."""
    return int(available_memory() * DEFAULT_FRACTION)


def current_rss() -> int:
    """Resident set size of this process now, in bytes (``/proc/self/statm``)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: ru_maxrss is an upper bound
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def format_size(size: float) -> str:
    """Bytes as ``"1.50 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.2f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.2f} TiB"


@dataclass(frozen=True)
class MemoryBudget:
    """How the limit splits into the process's footprint, per-node state and
    the working memory that sizes each pass's chunks.

    Args:
        limit: The limit on the peak RSS, in bytes.
        baseline: RSS of the process before partitioning (interpreter,
            libraries).
        state: Bytes held for the whole run (the book, the halo bitmap,
            per-part counters): they grow with the number of nodes.
        max_rows: Cap on :meth:`chunk_rows` (``None``: none).
    """

    limit: int
    baseline: int
    state: int
    max_rows: Optional[int] = None

    @property
    def working(self) -> int:
        """Bytes left for chunk buffers and their temporaries, less a
        sixteenth of the limit for the allocator's fragmentation."""
        return self.limit - self.baseline - self.state - self.limit // 16

    def check(self) -> None:
        """Raises if the limit leaves less than :data:`MIN_WORKING_BYTES`.

        Raises:
            PartitionMemoryError: naming the limit needed.
        """
        if self.working < MIN_WORKING_BYTES:
            need = (self.baseline + self.state + MIN_WORKING_BYTES) * 16 // 15
            raise memory_error(
                f"a memory limit of {format_size(self.limit)} is too small: the process "
                f"holds {format_size(self.baseline)} and the per-node state needs "
                f"{format_size(self.state)}, so at least {format_size(need)} is needed; "
                f"raise --memory-limit", need)

    def chunk_rows(self, bytes_per_row: int, share: float = 1.0) -> int:
        """How many rows of ``bytes_per_row`` (their temporaries included) fit
        in ``share`` of the working memory; at least 1."""
        rows = max(1, int(self.working * share) // max(1, bytes_per_row))
        return rows if self.max_rows is None else max(1, min(rows, self.max_rows))


def memory_error(message: str, need: int) -> PartitionMemoryError:
    """A :class:`~pyg_dist.errors.PartitionMemoryError` carrying ``need``."""
    exc = PartitionMemoryError(message)
    exc.need = need
    return exc


def release_freed_memory() -> None:
    """Hands memory freed by a pass back to the kernel (pyarrow's pool, whose
    mimalloc arenas keep what parquet decoding used, and glibc's
    ``malloc_trim``), so that the next pass starts from the footprint
    measured at the start."""
    import sys

    from pyg_dist.malloc_tuning import trim_heap

    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()
    trim_heap()


MMAP_THRESHOLD = 128 << 10
"""Blocks of at least this many bytes are mapped on their own by glibc (its
default threshold, made fixed by :func:`bounded_allocation`)."""
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


@contextmanager
def bounded_allocation() -> Iterator[None]:
    """Makes freed chunk buffers leave the RSS at once while the block runs.

    Two allocators otherwise keep what a pass frees and count it in the peak
    (measured on the bound test's graph, streaming's assign pass, chunks of
    300k edges, memory held above the footprint): 86 MiB as shipped;
    glibc raises its mmap threshold to the size of every mapped block it
    frees (up to 32 MiB), after which chunk-sized arrays come from the heap,
    whose freed holes stay resident: 71 MiB with the threshold fixed; and
    pyarrow's default pool (mimalloc) keeps the pages of freed record
    batches: 45 MiB with pyarrow on the system allocator too (150 bytes an
    edge, what the streaming partitioner's arrays add up to).

    So for the block pyarrow allocates from ``malloc`` (its pool is restored
    after; a buffer remembers its pool, so buffers alive across the switch
    are safe) and glibc's mmap threshold is fixed at :data:`MMAP_THRESHOLD`
    (``mallopt``; process-wide and left so: it only stops the threshold from
    growing, each large array is then mapped and unmapped on its own). This
    is the opposite of :func:`pyg_dist.malloc_tuning.tune_malloc` (a 1 GiB
    threshold, so that serving and training reuse their per-batch buffers):
    a process that partitions and then serves or trains should call
    ``tune_malloc()`` again (glibc has no call that reads the threshold
    back, so it cannot be restored here).
    """
    _fix_mmap_threshold()
    try:
        import pyarrow
    except ImportError:  # the reading functions say which extra to install
        yield
        return
    previous = pyarrow.default_memory_pool()
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    try:
        yield
    finally:
        pyarrow.set_memory_pool(previous)


def _fix_mmap_threshold() -> None:
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "mallopt"):  # glibc; others: no-op
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except OSError:
        pass
