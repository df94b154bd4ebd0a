"""Noticing a rank of a cross-host partitioning run that vanished without
closing its connections (its host lost, its process stopped or hung).

A rank that fails tells the others and closes its gloo connections
(:mod:`~pyg_dist.partitioning.rank_failure`), but a rank whose host is
powered off, cut from the network or whose process is stopped closes
nothing: its peers would wait in their next collective until the group's
timeout (30 minutes from the CLI). gloo cannot cancel a collective, and a
thread blocked in one cannot be interrupted from Python.

So every rank beats: a counter under the run's prefix in the job's store,
raised every :data:`BEAT_S` by a thread of its own (collectives, reads and
numpy release the GIL, so it beats while the rank works). A second thread,
which never touches the network, checks that every peer's counter moved
(and that this rank's own store calls return) within ``timeout`` seconds. If
not, the rank cannot go on: it runs its abort callbacks (the staging
directory and probe file are removed), logs a
:class:`~pyg_dist.errors.PartitionError` naming the silent rank, and ends
its process with status :data:`EXIT_STATUS` (no Python code of the blocked
main thread runs again). Under ``torchrun`` the agent then stops the
job's other ranks on this host, and each host's ranks notice the silent one
alike.

A rank that runs a partitioner alone (a plugin without
``assigns_across_ranks``, on rank 0) may hold the GIL for as long as the
plugin runs (pymetis does): it says so (:meth:`PeerWatch.busy`) and is not
timed out meanwhile, so a host lost during such an assignment is noticed
only at gloo's timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

logger = logging.getLogger(__name__)

BEAT_S = 1.0
"""Seconds between two beats of a rank."""

DEFAULT_TIMEOUT_S = 60.0
"""Seconds without a peer's beat after which it is taken for gone."""

EXIT_STATUS = 75
"""The process status of a rank that stopped because a peer fell silent."""


class PeerWatch:
    """Beats for this rank and watches every other rank's beat.

    Args:
        store: The job's store (``torch.distributed``'s default store).
        prefix: The run's keys (unique to the run, the same on every rank).
        rank: This rank.
        world: Ranks in the run.
        timeout: Seconds of silence after which a peer is taken for gone.
        on_abort: Called (in the watching thread) before the process ends.
    """

    def __init__(self, store: Any, prefix: str, rank: int, world: int, timeout: float,
                 on_abort: Callable[[str], None]) -> None:
        self.store, self.prefix, self.rank, self.world = store, prefix, rank, world
        self.timeout = float(timeout)
        self.on_abort = on_abort
        self._stop = threading.Event()
        now = time.monotonic()
        self._seen = {q: now for q in range(world) if q != rank}  # peer -> last move
        self._counts: dict[int, int] = {}
        self._store_ok = now  # this rank's last store round that returned
        self._busy_key = f"{prefix}/busy"
        self._threads: list[threading.Thread] = []

    def start(self) -> PeerWatch:
        """Starts beating and watching (daemon threads)."""
        for target, name in ((self._beat, "beat"), (self._watch, "watch")):
            thread = threading.Thread(target=target, name=f"pyg-dist-peer-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stops both threads (the run ended, or failed through the normal
        path); returns at once, the beating thread may finish a store call."""
        self._stop.set()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """This rank may not beat for a while (a plugin that holds the GIL):
        its peers do not time it out until the block ends."""
        self._set(self._busy_key, str(self.rank))
        try:
            yield
        finally:
            self._set(self._busy_key, "")

    def _set(self, key: str, value: str) -> None:
        try:
            self.store.set(key, value)
        except Exception as exc:  # noqa: BLE001 - the watch then reports the store
            logger.warning("could not write %s to the job's store: %s", key, exc)

    def _beat(self) -> None:
        own = f"{self.prefix}/beat/{self.rank}"
        while not self._stop.is_set():
            try:
                self.store.add(own, 1)
                busy = self.store.get(self._busy_key).decode() \
                    if self.store.check([self._busy_key]) else ""
                now = time.monotonic()
                for q in self._seen:
                    count = self.store.add(f"{self.prefix}/beat/{q}", 0)
                    if count != self._counts.get(q) or busy == str(q):
                        self._counts[q], self._seen[q] = count, now
                self._store_ok = now
            except Exception as exc:  # noqa: BLE001 - the watch counts the silence
                logger.debug("beat: the job's store did not answer: %s", exc)
            self._stop.wait(BEAT_S)

    def _watch(self) -> None:
        while not self._stop.wait(BEAT_S):
            silent = self.silent()
            if silent is not None:
                self._abort(silent)

    def silent(self) -> Optional[str]:
        """What has been silent for longer than the timeout (a peer, or the
        job's store), or ``None``."""
        now = time.monotonic()
        if now - self._store_ok > self.timeout:
            return (f"the job's store (the torchrun agent's, on the first host) did not "
                    f"answer for {now - self._store_ok:.0f} s")
        for q, seen in sorted(self._seen.items()):
            if now - seen > self.timeout:
                return (f"rank {q} of {self.world} was not heard from for {now - seen:.0f} s "
                        f"(its host lost, or its process stopped or hung)")
        return None

    def _abort(self, silent: str) -> None:
        if self._stop.is_set():
            return  # the run ended meanwhile
        message = (f"PartitionError: {silent}; rank {self.rank} of {self.world} stops "
                   f"(a gloo collective cannot be left otherwise) and nothing was written; "
                   f"raise --peer-timeout if a rank can be busy longer than "
                   f"{self.timeout:.0f} s")
        try:
            self.on_abort(message)
        finally:
            logger.critical("%s", message)
            logging.shutdown()  # the process ends without Python's exit
            os._exit(EXIT_STATUS)
