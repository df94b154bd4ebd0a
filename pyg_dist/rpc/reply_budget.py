"""Reply bytes a server holds per client, in bytes rather than in replies.

``reply_hwm`` bounds how many replies libzmq queues for a client that does
not read them, not how big they are: 300 answers of 11 MiB held 3.3 GiB. A
:class:`ReplyBudget` charges every answer before it is computed (the
operation's estimate of its size) and keeps the charge until libzmq has
handed the reply to the kernel, which a pyzmq ``MessageTracker`` on the
reply's last frame tells (frames of one connection leave in order, so a done
tracker also clears every reply sent to that client before it). A request
whose answer would take its client or the whole server over budget is
refused with a small error reply.

A tracker costs a round trip through pyzmq's garbage-collection thread (tens
of microseconds on a busy host), so only replies of :data:`TRACK_MIN` bytes
or more are tracked one by one. Smaller ones stay charged until a later
tracked reply to the same client is done (one in every :data:`TRACK_EVERY`
bytes is tracked for that), or until the client's connection has nothing
left unacknowledged in the kernel (:meth:`drained`): then libzmq holds no
reply for it either, and a client that went idle does not keep its charge.

Thread use: :meth:`reserve` and :meth:`settle` run on whichever thread
serves the request; :meth:`sent`, :meth:`poll` and :meth:`forget` on the
server's I/O thread. One lock guards the counters.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

# Replies at least this big are tracked one by one.
TRACK_MIN = 4 << 20
# Untracked bytes a client may accumulate before its next reply is tracked.
TRACK_EVERY = 8 << 20


@dataclass
class _Client:
    held: int = 0  # charged: reserved, computed, or sent and not yet released
    untracked: int = 0  # sent since the last tracked reply
    pending: collections.deque = field(default_factory=collections.deque)


class ReplyBudget:
    """Per-client and per-server byte budgets for replies.

    Args:
        client_budget: Most reply bytes held for one client.
        server_budget: Most reply bytes held for all clients together.
    """

    def __init__(self, client_budget: int, server_budget: int) -> None:
        self.client_budget = int(client_budget)
        self.server_budget = int(server_budget)
        self._lock = threading.Lock()
        self._clients: dict[bytes, _Client] = {}
        self._total = 0
        self.refused = 0
        self.peak = 0
        """The most reply bytes held for all clients at once so far."""

    @property
    def total(self) -> int:
        """Reply bytes held for all clients."""
        return self._total

    def held(self, client: bytes) -> int:
        """Reply bytes held for ``client``."""
        entry = self._clients.get(client)
        return 0 if entry is None else entry.held

    def never_fits(self, op: str, nbytes: int) -> Optional[str]:
        """Why an answer of ``nbytes`` (with its working memory) can never be
        charged, even with nothing else held; ``None`` when it can."""
        if nbytes <= min(self.client_budget, self.server_budget):
            return None
        self.refused += 1
        budget, var = (self.client_budget, "PYG_DIST_CLIENT_REPLY_BUDGET") \
            if self.client_budget <= self.server_budget else \
            (self.server_budget, "PYG_DIST_SERVER_REPLY_BUDGET")
        return (f"{op!r} needs up to {nbytes} bytes for its answer and working memory, "
                f"over this server's whole reply budget of {budget} bytes ({var}, "
                f"--{var[9:].lower().replace('_', '-')}): asking again cannot succeed; "
                f"ask for less per call (fewer seeds, smaller fan-outs) or raise the budget")

    def reserve(self, client: bytes, nbytes: int) -> Optional[str]:
        """Charges ``nbytes`` to ``client`` if both budgets allow it.

        Returns:
            ``None`` when charged, else why not (for the error reply).
        """
        if nbytes <= 0:
            return None
        with self._lock:
            entry = self._clients.get(client)
            held = 0 if entry is None else entry.held
            if held + nbytes > self.client_budget or self._total + nbytes > self.server_budget:
                # Replies sent since the last poll may be out already.
                self._release_done()
                held = 0 if (entry := self._clients.get(client)) is None else entry.held
            if held + nbytes > self.client_budget:
                self.refused += 1
                return (f"this server holds {held} bytes of replies for this client not "
                        f"yet sent, and this answer needs up to {nbytes} more, over its "
                        f"per-client reply budget of {self.client_budget} bytes "
                        f"(PYG_DIST_CLIENT_REPLY_BUDGET); read the replies of earlier "
                        f"calls first, or ask for less per call")
            if self._total + nbytes > self.server_budget:
                self.refused += 1
                return (f"this server holds {self._total} bytes of replies for all "
                        f"clients, and this answer needs up to {nbytes} more, over its "
                        f"reply budget of {self.server_budget} bytes "
                        f"(PYG_DIST_SERVER_REPLY_BUDGET); retry later")
            if entry is None:
                entry = self._clients[client] = _Client()
            entry.held += nbytes
            self._total += nbytes
            self.peak = max(self.peak, self._total)
            return None

    def settle(self, client: bytes, reserved: int, charge: int) -> None:
        """Replaces a reservation by what the computed reply keeps charged.

        Args:
            client: The routing id.
            reserved: What :meth:`reserve` charged.
            charge: What stays charged until the reply is sent.
        """
        if reserved != charge:
            self._add(client, charge - reserved)

    def revise(self, client: bytes, charged: int, nbytes: int) -> None:
        """Replaces a running request's charge of ``charged`` bytes by
        ``nbytes``, what it holds now plus what it may still build. Never
        refused: the work is under way, and refusing it would waste what it
        did; a revision upwards only makes the next requests wait (their
        reservation sees it)."""
        if nbytes != charged:
            self._add(client, nbytes - charged)

    def _add(self, client: bytes, delta: int) -> None:
        with self._lock:
            entry = self._clients.get(client)
            if entry is None:
                return  # forgotten: its connection ended meanwhile
            entry.held += delta
            self._total += delta
            self.peak = max(self.peak, self._total)
            if entry.held <= 0 and not entry.pending and not entry.untracked:
                self._total -= entry.held
                del self._clients[client]

    # I/O thread ############################################################

    def wants_tracking(self, client: bytes, charge: int) -> bool:
        """Whether the reply about to be sent to ``client`` should be tracked."""
        if charge <= 0:
            return False
        entry = self._clients.get(client)
        return charge >= TRACK_MIN or (entry is not None
                                       and entry.untracked + charge >= TRACK_EVERY)

    def sent(self, client: bytes, charge: int, tracker: Any = None) -> None:
        """Records a reply handed to libzmq, charged ``charge`` bytes.

        Args:
            client: The routing id.
            charge: The bytes charged for it (as settled).
            tracker: Its last frame's ``MessageTracker``, or ``None`` when it
                was not tracked (then a later tracked reply releases it).
        """
        if charge <= 0:
            return
        with self._lock:
            entry = self._clients.get(client)
            if entry is None:
                return
            if tracker is None:
                entry.untracked += charge
            else:
                entry.pending.append((tracker, entry.untracked + charge))
                entry.untracked = 0

    def dropped(self, client: bytes, charge: int) -> None:
        """Releases the charge of a reply libzmq refused or could not route."""
        if charge > 0:
            self._add(client, -charge)

    def poll(self) -> int:
        """Releases the replies libzmq has handed to the kernel; returns how
        many bytes were released."""
        with self._lock:
            return self._release_done()

    def _release_done(self) -> int:
        released = 0
        for client, entry in list(self._clients.items()):
            pending = entry.pending
            freed = 0
            while pending and pending[0][0].done:
                freed += pending.popleft()[1]
            if freed:
                entry.held -= freed
                self._total -= freed
                released += freed
                if entry.held <= 0 and not pending and not entry.untracked:
                    self._total -= entry.held
                    del self._clients[client]
        return released

    def drained(self, client: bytes) -> None:
        """Releases the untracked replies of a client whose connection has
        nothing left to send (its tracked ones release themselves)."""
        with self._lock:
            entry = self._clients.get(client)
            if entry is None or not entry.untracked:
                return
            entry.held -= entry.untracked
            self._total -= entry.untracked
            entry.untracked = 0
            if entry.held <= 0 and not entry.pending:
                self._total -= entry.held
                del self._clients[client]

    def forget(self, client: bytes) -> None:
        """Drops the accounting of a client whose connection ended (libzmq
        dropped what was queued for it)."""
        with self._lock:
            entry = self._clients.pop(client, None)
            if entry is not None:
                self._total -= entry.held
