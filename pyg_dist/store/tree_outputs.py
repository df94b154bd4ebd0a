"""A batch's outputs lent to its ``sample_tree`` coordinator: features in the tree's round trip.

A loader that samples a homogeneous batch on the servers and then fetches
its nodes' features asks each owning server for its share: one round trip
for the tree, one more for the rows. When every server that may be asked
runs on the trainer's host, the loader can instead lend the tree's
coordinator the batch's outputs (:mod:`pyg_dist.protocol.tree_rows`): the
coordinator has every owner write its rows there before it answers, and the
batch's features are read where they lie.

The loader says that it will fetch a batch's node features right after
sampling it by sampling inside :func:`fetching`; the sampler then asks
:func:`planned` for a :class:`TreeOutputs` (the feature store's
:meth:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore.tree_outputs`:
``None`` when the store cannot lend them) and, once the tree is answered,
remembers the rows for that very node tensor
(:mod:`pyg_dist.store.known_owners`), where the feature store finds them.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Optional

from torch import Tensor

_local = threading.local()


@contextlib.contextmanager
def fetching(feature_store: Any) -> Iterator[None]:
    """Within this block, on this thread, a tree sampled on the servers is
    followed by a fetch of every node feature of ``feature_store`` for the
    tree's nodes (a loader's batch)."""
    before = getattr(_local, "store", None)
    _local.store = feature_store
    try:
        yield
    finally:
        _local.store = before


def planned(router: Any, coordinator: int, seeds: int,
            bound: Optional[int]) -> Optional[TreeOutputs]:
    """The outputs to lend the coordinator of a tree of ``seeds`` seeds and
    at most ``bound`` nodes (``None``: unbounded), or ``None``: not inside
    :func:`fetching`, a store over another router, or one that cannot lend
    them."""
    store = getattr(_local, "store", None)
    lend = getattr(store, "tree_outputs", None)
    if lend is None or bound is None or getattr(store, "router", None) is not router:
        return None
    return lend(seeds, bound, coordinator)


def saw(router: Any, seeds: int, nodes: int) -> None:
    """A tree of ``seeds`` seeds over ``router`` had ``nodes`` nodes: told
    to the store of the :func:`fetching` block around it, if any (whether
    or not its rows were asked for: a tree too big for any segment at its
    bound still teaches the store how many rows to lend)."""
    store = getattr(_local, "store", None)
    sizes = getattr(store, "tree_sizes", None)
    if sizes is not None and getattr(store, "router", None) is router:
        sizes.saw(seeds, nodes)


class TreeSizes:
    """How many rows to lend a tree: the fan-outs' bound, until trees have
    been seen; then the most nodes a seed brought in the last ``window``
    trees, times ``headroom``, within the bound.

    The bound counts ``k`` new nodes per node and hop; on a real graph
    sampled nodes repeat, and a products-shaped batch at [15, 10, 5] has
    about a third of its bound's nodes: lent the bound, each batch would
    take three times the shared memory it fills. A tree that outgrows what
    was lent has no rows written (its trainer fetches them), and its size
    counts from then on.
    """

    def __init__(self, window: int = 64, headroom: float = 1.2) -> None:
        self._seen: collections.deque[float] = collections.deque(maxlen=window)
        self._headroom = headroom

    def rows(self, seeds: int, bound: int) -> int:
        """Rows to lend a tree of ``seeds`` seeds bounded by ``bound``."""
        seen = list(self._seen)  # other loader threads append meanwhile
        if not seen:
            return bound
        return min(bound, math.ceil(max(seen) * self._headroom * seeds) + 64)

    def saw(self, seeds: int, nodes: int) -> None:
        """A tree of ``seeds`` seeds had ``nodes`` nodes."""
        self._seen.append(nodes / max(seeds, 1))


class TreeOutputs:
    """One batch's outputs, lent to its tree's coordinator and every owner.

    Args:
        attrs: The node features asked for, in order.
        lease: The :class:`~pyg_dist.rpc.shm.outputs.OutputLease` they lie
            in, ``[rows lent, *shape]`` each, with room for as many ids
            and output rows after them.
        places: Per part, the ``place`` argument its server may write with,
            or ``None`` (the coordinator copies that part's rows in).
        coordinator: The part coordinating the tree.
    """

    def __init__(self, attrs: Sequence[str], lease: Any,
                 places: Sequence[Optional[dict[str, Any]]], coordinator: int) -> None:
        self.attrs = list(attrs)
        self.lease = lease
        self.places = list(places)
        self.coordinator = coordinator
        self._given_up = False

    @property
    def lent(self) -> bool:
        """Whether the tree is still asked with ``rows`` (not given up)."""
        return not self._given_up

    def arg(self) -> dict[str, Any]:
        """The tree request's ``rows`` argument."""
        return {"attrs": self.attrs, "places": self.places, "room": self.lease.room()}

    def given_up(self, refused: bool) -> None:
        """The tree is asked again without ``rows``: the coordinator could
        not map the outputs (``refused``: nothing was written), or the first
        attempt was lost (its owners may still write: never reuse them)."""
        self._given_up = True
        if refused:
            self.lease.refused(self.coordinator)
        else:
            self._lost()

    def failed(self) -> None:
        """The tree failed: any owner may have been asked and may still write."""
        if not self._given_up:
            self._given_up = True
            self._lost()

    def settle(self, outcome: dict[str, Any], num_nodes: int) -> Optional[list[Tensor]]:
        """The outputs of the tree's ``num_nodes`` rows (``None``: not
        written, the tree outgrew them), after its checked ``rows`` result
        (:func:`pyg_dist.protocol.tree_rows.check`) is told to the pool: who
        maps the segment now, who refused, who may write late."""
        for part in outcome["placed"]:
            self.lease.placed(part)
        for part in outcome["refused"]:
            self.lease.refused(part)
        for part in outcome["lost"]:
            self.lease.lost(part)
        self.lease.settle()  # every server asked has answered
        if not outcome["written"]:
            return None
        return [t[:num_nodes] for t in self.lease.tensors]

    def _lost(self) -> None:
        for part, place in enumerate(self.places):
            if place is not None:
                self.lease.lost(part)
