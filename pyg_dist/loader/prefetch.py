"""Prefetch pipeline: keep K batches in flight while the model trains.

A loader hands the pipeline the *cheap* part of its iteration (the seed
batches, in order) and a ``produce`` function doing the expensive part
(sampling RPCs, then one feature fetch per server). Up to ``depth`` batches
are produced at once on worker threads: while the model trains on batch
``i``, batches ``i+1 .. i+K`` are being sampled and fetched, and the feature
fetch of one batch overlaps the sampling of the next. ZeroMQ and torch
kernels release the GIL, so the threads really do overlap.

Guarantees:

* Batches come out in the order of the seed batches, whatever order the
  workers finish in, so a fixed seed gives the same batches for every
  ``depth`` (the loader derives every random seed on the consumer side,
  before submitting).
* An exception raised while producing batch ``i`` is raised on the consumer
  thread when batch ``i`` is asked for, with its original type.
* Leaving the loop early (``break``, an exception in the training step,
  garbage collection of the iterator) cancels batches not yet started and
  waits for the running ones (each bounded by its RPC deadline), then joins
  every worker thread: no thread and no request is left behind.
* With a CUDA ``device``, a worker pins the batch's memory and copies it on
  a side stream with ``non_blocking=True``; the consumer's stream waits on
  that copy only when it takes the batch, so the copy overlaps compute.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, Optional, TypeVar

import torch

from pyg_dist.errors import LoaderError
from pyg_dist.store.remote_feature_store import pinned_outputs

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class _CudaMover:
    """Pinned-memory, side-stream host-to-device copies of whole batches."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device)

    def to_device(self, batch: Any) -> tuple[Any, Any]:
        """Runs on a worker: pin, enqueue the copy, return (batch, event).

        Features fetched under :func:`pinned_outputs` are pinned already
        (page-locked shared memory the servers wrote them into);
        only what is not is copied into pinned memory (ids, edge index;
        rows of a GPU feature cache are on the device already). The host
        batch is held until its copy is done: dropped, an output segment
        goes back to its pool at once, and the next batch's rows would be
        written into memory the copy may still be reading.
        """
        host = batch.apply(_pinned)
        with torch.cuda.stream(self.stream):
            # PyG's to() works in place: a shallow copy keeps the host tensors.
            moved = copy.copy(host).to(self.device, non_blocking=True)
            # A blocking event: its synchronize() sleeps until the copy is
            # done. The default one spins a core per waiting worker, and
            # on a GPU host those cores are the partition servers' (an H200
            # run's servers used 9.3 of its 16 cores).
            event = torch.cuda.Event(blocking=True)
            event.record(self.stream)
        event.synchronize()  # this worker's copy only; then `host` may go
        return moved, event

    def hand_over(self, batch: Any, event: Any) -> Any:
        """Runs on the consumer: order its stream after the copy."""
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)

        # Memory allocated on the side stream is now used on another one:
        # tell the caching allocator so it is not reused too early.
        def _record(t: torch.Tensor) -> torch.Tensor:
            if t.is_cuda:
                t.record_stream(current)
            return t

        return batch.apply(_record)


def _pinned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in page-locked memory: as it is if it is there already (or
    on a device: a GPU feature cache's rows), else pinned (a copy)."""
    if tensor.device.type != "cpu" or tensor.is_pinned():
        return tensor
    return tensor.pin_memory()


WORKER_THREADS_ENV = "PYG_DIST_LOADER_THREADS"


def worker_threads() -> int:
    """torch intra-op threads of each prefetch worker: ``PYG_DIST_LOADER_THREADS``,
    ``0`` (the default) for the process's own count.

    A worker's ops are small (a batch's ids, a hop's neighbours) and several
    workers run at once beside the servers, so an OpenMP team per op can
    cost more than it saves: a member that loses its core stalls the op for
    a scheduler slice (int32 min + max of 150k ids: 22 us on one thread, 10 ms
    with two on a loaded 2-core machine). But one thread per op also makes
    each op slower, and a loader bound by a batch's latency loses by that: on
    an H200 with 16 cores, 1 here (and one thread per server op) fed [15, 10]
    no faster than the defaults, so the default stays the process's count.
    OpenMP's thread count is per thread: the consumer's (the model's) own
    count is unchanged either way.

    Raises:
        LoaderError: if the variable is not an integer >= 0.
    """
    raw = os.environ.get(WORKER_THREADS_ENV, "0")
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise LoaderError(f"{WORKER_THREADS_ENV} must be an integer >= 0 (0: the process's "
                          f"own thread count), got {raw!r}")
    return value


class PrefetchPipeline(Generic[T, R]):
    """Produces items ahead of the consumer on a pool of worker threads.

    Args:
        produce: Turns one work item (e.g. a batch of seed ids with its
            random seed) into a finished batch. Called on worker threads; it
            must be thread-safe.
        depth: How many items may be in flight beyond the one the consumer
            holds (``K``). Must be at least 1.
        device: If a CUDA device, finished batches are pinned and copied to
            it on a side stream; another device gets them copied by the
            worker. ``None`` or a CPU device leaves them where they are.
        pin_memory: Pin every finished batch on the worker (a CUDA
            ``device`` pins anyway).
        name: Prefix of the worker threads' names (shows up in stack dumps).
        workers: Worker threads; ``None``: ``depth`` (every batch in flight
            produced at once). Fewer produce the ``depth`` batches in turn.
    """

    def __init__(
        self,
        produce: Callable[[T], R],
        depth: int,
        *,
        device: Optional[torch.device | str] = None,
        pin_memory: bool = False,
        name: str = "pyg-dist-prefetch",
        workers: Optional[int] = None,
    ) -> None:
        if not isinstance(depth, int) or depth < 1:
            raise LoaderError(
                f"prefetch depth must be a positive integer, got {depth!r}; "
                f"use prefetch=0 on the loader for the synchronous path")
        self.produce = produce
        self.depth = depth
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise LoaderError(f"prefetch workers must be a positive integer, got {workers!r}")
        self.workers = depth if workers is None else min(workers, depth)
        self.name = name
        dev = torch.device(device) if device is not None else None
        self._mover = _CudaMover(dev) if dev is not None and dev.type == "cuda" else None
        # Any other accelerator: a plain copy on the worker.
        self._device = dev if dev is not None and dev.type not in ("cuda", "cpu") else None
        self._pin = bool(pin_memory)

    def _work(self, item: T, failed: threading.Event, grad: bool) -> Any:
        # Once a batch of this epoch has failed, the consumer is about to see
        # that error: starting more work would only make it wait for another
        # full RPC deadline before the pipeline can shut down.
        if failed.is_set():
            raise LoaderError("skipped: an earlier batch of this epoch failed")
        # Grad mode is per thread: a worker follows the consumer's at the
        # epoch's start, or an evaluation under no_grad would record autograd
        # graphs for its batches (a DistEmbedding's rows) and keep them alive.
        with torch.set_grad_enabled(grad):
            return self._produced(item, failed)

    def _produced(self, item: T, failed: threading.Event) -> Any:
        try:
            if self._mover is not None:
                with pinned_outputs():
                    return self._mover.to_device(self.produce(item))
            batch = self.produce(item)
            if self._pin:
                batch = batch.pin_memory()
            return batch if self._device is None else batch.to(self._device)
        except BaseException:
            failed.set()
            raise

    def _finish(self, future: Future) -> R:
        out = future.result()
        if self._mover is not None:
            return self._mover.hand_over(*out)
        return out

    def __call__(self, items: Iterable[T]) -> Iterator[R]:
        """Yields ``produce(item)`` for every item, in order, ``depth`` ahead.

        Args:
            items: The work items. Iterated lazily on the consumer thread.
                The workers produce under the consumer's grad mode of now.
        """
        return self._run(iter(items), torch.is_grad_enabled())

    def _run(self, items: Iterator[T], grad: bool) -> Iterator[R]:
        threads = worker_threads()
        # Read first on this thread: it fixes this thread's own count before
        # the workers change the process default for threads started later.
        previous = torch.get_num_threads() if threads else 0
        executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=self.name,
                                      initializer=torch.set_num_threads if threads else None,
                                      initargs=(threads,) if threads else ())
        pending: deque[Future] = deque()
        failed = threading.Event()
        done = object()
        try:
            for _ in range(self.depth):
                item = next(items, done)
                if item is done:
                    break
                pending.append(executor.submit(self._work, item, failed, grad))
            index = 0
            while pending:
                head = pending.popleft()
                item = next(items, done)
                if item is not done:
                    pending.append(executor.submit(self._work, item, failed, grad))
                try:
                    batch = self._finish(head)
                except BaseException as exc:
                    logger.debug("batch %d failed in the prefetch pipeline", index)
                    if hasattr(exc, "add_note"):
                        exc.add_note(f"raised while preparing batch {index} of the epoch")
                    raise
                index += 1
                yield batch
        finally:
            # Runs on normal exhaustion, on an error, and when the consumer
            # abandons the iterator (break -> generator close()).
            for future in pending:
                future.cancel()
            executor.shutdown(wait=True, cancel_futures=True)
            if previous:
                torch.set_num_threads(previous)  # the process default back as it was
