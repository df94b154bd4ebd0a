"""One rank's failure ends a cross-host partitioning run on every rank
within seconds, naming the rank and its error
(:mod:`~pyg_dist.partitioning.cross_host`).

gloo cannot cancel a collective: a rank that raises would leave the others
blocked in their next round until the group's timeout (30 minutes from the
CLI). So a rank that fails (an exception, SIGTERM, Ctrl-C) first writes why
under a key of the job's store (the ``TCPStore`` torchrun's agent hosts),
then destroys its process group, which closes its gloo connections: a peer
blocked on it gets "Connection closed by peer" at once, reads the key and
fails too, with a :class:`~pyg_dist.errors.PartitionError` naming the rank
and its error, destroying its own group in turn (which wakes the ranks that
wait on it rather than on the failed one). A peer busy with local work
notices at its next round (a chunk or a window later).

A rank that vanishes without closing anything (its host lost, its process
stopped) is noticed by its silence instead
(:mod:`~pyg_dist.partitioning.peer_watch`).

The failed rank re-raises its own error (typed as it was; SIGTERM becomes a
``PartitionError``, Ctrl-C stays ``KeyboardInterrupt``). The process group is
destroyed on every rank either way: its ranks are out of step and no
collective could follow.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any, Optional

import torch.distributed as dist

from pyg_dist.errors import PartitionError
from pyg_dist.partitioning.peer_watch import DEFAULT_TIMEOUT_S, PeerWatch

logger = logging.getLogger(__name__)

ACK_WAIT_S = 3.0
"""How long a failed rank waits for its peers to read why before it goes on
failing (its process may host the store when the group was not started by
torchrun)."""


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread (a ``BaseException``, like
    ``KeyboardInterrupt``, so that no ``except Exception`` swallows it)."""


class RankFailureGuard:
    """Context manager around a rank's share of a cross-host run: on any
    error, tells the other ranks (store key, then the group's connections
    closed) and raises the error that names the rank that failed first.

    Args:
        token: The run's token, the same on every rank (names the keys).
        peer_timeout: Seconds without a peer's beat after which this rank
            stops (:class:`~pyg_dist.partitioning.peer_watch.PeerWatch`).
    """

    def __init__(self, token: str, peer_timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.token = token
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self._store: Any = dist.distributed_c10d._get_default_store()
        self._prefix = f"pyg_dist/partition/{token}"
        self._reported = False
        self._cause: Optional[dict[str, Any]] = None  # another rank's report
        self._old_handler: Any = None
        self._cleanups: list[Callable[[], None]] = []
        self._watch = PeerWatch(self._store, self._prefix, self.rank, self.world, peer_timeout,
                                self._on_silent_peer)

    def __enter__(self) -> RankFailureGuard:
        # Python runs signal handlers in the main thread only, and only there
        # may one be installed.
        if threading.current_thread() is threading.main_thread():
            self._old_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.world > 1:
            self._watch.start()
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> bool:
        self._watch.stop()
        try:
            if exc is None:
                return False
            self.report(exc)
        finally:
            if self._old_handler is not None:
                signal.signal(signal.SIGTERM, self._old_handler)
        if self._cause is not None:
            raise PartitionError(
                f"rank {self._cause['rank']} of {self.world} failed: {self._cause['error']}; "
                f"this rank ({self.rank}) stopped too and nothing was written "
                f"(this rank saw: {_describe(exc)[:200]})") from exc
        if isinstance(exc, _Terminated):
            raise PartitionError(f"rank {self.rank} of {self.world} was stopped by SIGTERM; "
                                 f"every rank stopped and nothing was written") from None
        return False  # this rank's own error goes on, as it was raised

    def on_abort(self, cleanup: Callable[[], None]) -> None:
        """Runs ``cleanup`` if this rank's process ends because a peer fell
        silent (the main thread, blocked in a collective, runs nothing)."""
        self._cleanups.append(cleanup)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """This rank may hold the GIL for a while (a partitioner plugin run on
        it alone): its peers do not take its silence for a loss meanwhile."""
        with self._watch.busy():
            yield

    def _on_silent_peer(self, message: str) -> None:
        """The peer watch's last act before the process ends: the ranks
        still running read why from this rank's report when its connections
        close; then what this rank staged is removed."""
        if not self._reported:
            self._reported = True
            self._write({"rank": self.rank, "error": message.removeprefix("PartitionError: ")})
        for cleanup in reversed(self._cleanups):
            try:
                cleanup()
            except Exception as exc:  # noqa: BLE001 - the others still run
                logger.warning("cleanup after a silent peer failed: %s", exc)

    def report(self, exc: BaseException) -> None:
        """Tells the other ranks that this rank fails (once): the first
        failure another rank reported is the cause, else this rank's error
        is, and is written under this rank's key; then the process group is
        destroyed, so that every peer waiting on this rank wakes at once.
        Called before the staging directory is removed, so that a peer whose
        files vanish finds the cause already reported."""
        if self._reported:
            return
        self._reported = True
        self._watch.stop()  # the failure path below ends the run on every rank
        self._cause = self._first_report()
        if self._cause is None and not _is_peer_loss(exc):
            self._write({"rank": self.rank, "error": _describe(exc)})
        elif self._cause is None:
            # Closed by a peer that reported nothing: killed (SIGKILL, out of
            # memory) or its host lost.
            self._cause = {"rank": "?", "error": "a rank ended without reporting an error "
                           f"(killed, out of memory, or its host lost): {_describe(exc)[:300]}"}
        logger.error("rank %d of %d: %s; stopping every rank", self.rank, self.world,
                     _describe(exc) if self._cause is None else
                     f"rank {self._cause['rank']} failed: {self._cause['error']}")
        if dist.is_initialized():
            dist.destroy_process_group()
        if self._cause is None:
            self._wait_for_acks()
        else:
            self._ack()

    def _on_sigterm(self, signum: int, frame: Optional[FrameType]) -> None:
        if not self._reported:  # a signal during the failure path changes nothing
            raise _Terminated()

    def _write(self, report: dict[str, Any]) -> None:
        try:
            self._store.set(f"{self._prefix}/failed/{self.rank}", json.dumps(report))
        except Exception as exc:  # noqa: BLE001 - the store may be gone with its host
            logger.warning("could not report the failure to the other ranks: %s", exc)

    def _first_report(self) -> Optional[dict[str, Any]]:
        """The report of the lowest other rank that failed, if any did."""
        for q in range(self.world):
            if q == self.rank:
                continue
            key = f"{self._prefix}/failed/{q}"
            try:
                if self._store.check([key]):
                    return _parse_report(self._store.get(key), q)
            except Exception:  # noqa: BLE001 - a store that went with its host
                return None
        return None

    def _ack(self) -> None:
        try:
            self._store.add(f"{self._prefix}/read", 1)
        except Exception:  # noqa: BLE001 - nobody waits for an ack that fails
            pass

    def _wait_for_acks(self) -> None:
        deadline = time.monotonic() + ACK_WAIT_S
        try:
            while (self._store.add(f"{self._prefix}/read", 0) < self.world - 1
                   and time.monotonic() < deadline):
                time.sleep(0.05)
        except Exception:  # noqa: BLE001 - the store went first: nothing to wait for
            pass


def _is_peer_loss(exc: BaseException) -> bool:
    """Whether ``exc`` is gloo reporting that a peer went away (its
    connection closed or reset), rather than an error of this rank."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer",
                            "Broken pipe", "gloo/transport"))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, _Terminated):
        return "stopped by SIGTERM"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (SIGINT, Ctrl-C)"
    return f"{type(exc).__name__}: {exc}"


def _parse_report(raw: bytes, rank: int) -> dict[str, Any]:
    """Another rank's report, checked: a store key is input like any other."""
    try:
        value = json.loads(raw.decode())
        error = str(value["error"])[:2000]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        error = "an unreadable failure report"
    return {"rank": rank, "error": error}
