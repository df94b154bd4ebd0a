"""Keep big per-batch buffers in the heap instead of fresh pages every batch.

A batch of 1,024 seeds with fan-out ``[15, 10]`` and 128 float32 features
moves ~40 MB of feature rows: the server gathers them into a new tensor, the
client receives them into new ZeroMQ buffers and copies them into a new
``x``. glibc serves every allocation over its mmap threshold (at most 32 MiB,
adapted at run time) with fresh pages from the kernel and gives them back on
``free``, so each batch pays a page fault per 4 KiB again: measured here,
filling a fresh 40 MB ``x`` took 25-30 ms against 9-11 ms for memory already
touched, and the trainer's CPU time per batch dropped by about a fifth with
the tuning below.

:func:`tune_malloc` raises the mmap threshold to 1 GiB and the trim
threshold to 2 GiB, so those buffers come from the heap and are reused. The
price is that freed memory stays with the process (its high-water mark)
instead of going back to the kernel. ``pyg-dist serve``, ``pyg-dist
bench`` and :func:`pyg_dist.connect` (so every trainer, however launched,
unless it passes ``connect(tune_malloc=False)``) call it; ``pyg-dist
launch`` also passes the same settings to the trainers through glibc's
environment variables (:func:`malloc_environment`).
``PYG_DIST_TUNE_MALLOC=0`` turns all of it off where no caller says
otherwise (``connect(tune_malloc=True)`` tunes anyway). Elsewhere than
glibc it does nothing.

It also makes every thread allocate from one arena. glibc gives threads
arenas of their own, built of heaps of at most 64 MiB, and unmaps a heap
that became empty whatever the trim threshold. A thread that allocates a
reply of tens of MB while its previous one is still alive needs a second
heap, gone again once that reply is freed: a server worker gathering
feature rows (the work queue hands calls that come one after another to the
same worker), and in a trainer libzmq's I/O thread receiving them over TCP.
Measured on 2 cores, one 51 MB ``get`` at a time: ~6,300 page faults per
call in the server worker and 38-40 ms per call with per-thread arenas,
~180 faults and 29 ms with one. 51 MB replies eight at a time: the client's
libzmq thread spent 38.6 ms of CPU per reply, 19.5 ms with one arena.
``pyg-dist bench``, loader over TCP: 19.4-22.1k seeds/s with per-thread
arenas in the trainer, 26.1-26.7k with one; the other rows, training
compute included, moved within their noise. Threads then share one
allocator lock. glibc applies the setting when a thread first allocates,
and not at all once it has sized its arena table (after a second thread
allocated), so :func:`tune_malloc` is called before a process starts its
own threads; ``pyg-dist launch`` sets ``MALLOC_ARENA_MAX`` for trainers
from their start, and a trainer that connects after starting threads keeps
per-thread arenas (:func:`tune_malloc` then says so once, at INFO).
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Optional

logger = logging.getLogger(__name__)

ENV_SWITCH = "PYG_DIST_TUNE_MALLOC"
MMAP_THRESHOLD = 1 << 30
TRIM_THRESHOLD = (1 << 31) - 1
ARENA_MAX = 1

# mallopt() parameter numbers from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def _enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def tune_malloc(enabled: Optional[bool] = None) -> bool:
    """Raises glibc's mmap and trim thresholds and makes new threads share
    one arena in this process (see the module's docstring).

    Args:
        enabled: ``True`` tunes, ``False`` leaves the allocator alone,
            ``None`` (the default) tunes unless ``PYG_DIST_TUNE_MALLOC`` is
            ``0``/``false``/``no``/``off``.

    Returns:
        Whether the allocator was tuned (``False`` when switched off or when
        the C library has no ``mallopt``).
    """
    if not (_enabled() if enabled is None else enabled):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS, ...): nothing to tune
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    tuned = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) \
        and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) \
        and bool(mallopt(_M_ARENA_MAX, ARENA_MAX))
    logger.debug("malloc tuning %s", "applied" if tuned else "refused by the C library")
    if tuned:
        _tell_late_arenas()
    return tuned


_told = False


def _tell_late_arenas() -> None:
    """Says once, at INFO, when the one-arena setting came too late: threads
    that allocated before it keep arenas of their own, and threads started
    later may be handed theirs. A prefetch worker then page-faults its
    batch's buffers anew (a loader whose parts are all read in the trainer,
    600k nodes, [15, 10], 2 cores: 30.2k seeds/s at prefetch 4, 36.2k with
    ``MALLOC_ARENA_MAX=1`` from the start)."""
    global _told
    if _told or os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return
    if threads > 1:
        _told = True
        logger.info("this process ran %d threads when pyg-dist tuned its allocator: they "
                    "keep malloc arenas of their own, and loader threads may get one, "
                    "page-faulting every batch's buffers anew; start the process with "
                    "MALLOC_ARENA_MAX=1 in its environment (pyg-dist launch does) for one arena",
                    threads)


def trim_heap() -> None:
    """Hands the heap's free memory back to the kernel (glibc's
    ``malloc_trim(0)``; nothing elsewhere).

    The tuning keeps freed memory for the next batch's buffers, so a
    one-off peak stays resident too: a server loading a part built ~260 MB
    of temporaries for a 410 MB part served through the mmap stores (8M
    edges), which then stayed in its anonymous memory (RssAnon 293 MB
    untuned, 556 MB tuned; 273 MB after this). Call it after such a phase.
    """
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)


def malloc_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` plus glibc's variables for the same tuning, for a child process.

    Values the caller already set win; nothing is added when switched off.

    Args:
        env: The child's environment (not modified).
    """
    out = dict(env)
    if _enabled():
        out.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD))
        out.setdefault("MALLOC_TRIM_THRESHOLD_", str(TRIM_THRESHOLD))
        out.setdefault("MALLOC_ARENA_MAX", str(ARENA_MAX))
    return out
