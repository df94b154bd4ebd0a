"""A coordinator writing its tree's node rows into the trainer's outputs (``rows``).

A ``sample_tree`` asked with ``rows`` (:mod:`pyg_dist.protocol.tree_rows`)
names, per part, where that part's server may write rows: the trainer's
outputs, in a segment it lent every server on its host. Once the tree is
sampled, :class:`TreeRowWriter` maps the outputs (the coordinator's own
place first, so that a segment it cannot map is refused before any peer is
asked), and fetches the rows of the tree's nodes grouped by owner with the
trainer's own fetch (:func:`~pyg_dist.routing.row_fetch.fetch_rows`) over
the coordinator's router: each part with a place gets a ``get`` with
``place`` and writes its share there itself (the coordinator's own share in
process, with the request's call context: ``OwnPartFirst.lent``); the ids
and output rows of each share go into the room the trainer lent after its
outputs (``place.index``), so none cross a socket. A part that cannot map
the outputs answers the plain ``get`` and its rows are copied in here; a
part without a place is asked the plain ``get`` at once. So the trainer's
batch costs it one round trip, and each row still crosses memory once on
its owner's side.

Outputs lent for fewer rows than the tree has nodes are left alone
(``written: false``): the trainer fetches the rows as usual.

What it trusts: nothing the trainer sent but the segment, which the
shared-memory service checks (token, bounds); every owner checks the ids and
output rows it is sent, as it does a trainer's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

from torch import Tensor

from pyg_dist.errors import ProtocolError, SharedMemoryError, StoreError
from pyg_dist.protocol.ops import GET
from pyg_dist.routing.row_fetch import RowRequest, fetch_rows, within_reply_limits
from pyg_dist.rpc.context import CallContext
from pyg_dist.rpc.wire_format import DTYPES
from pyg_dist.rpc.wire_values import describe


class _Placement:
    """The trainer's outputs as :func:`~pyg_dist.routing.row_fetch.fetch_rows`
    sees a placement: which parts may write into them (those the trainer
    gave a place), where each peer's ids and output rows go (the room the
    trainer lent, when it did) and what became of each part."""

    def __init__(self, places: Sequence[Optional[dict[str, Any]]], own: int,
                 room: Optional[Tensor], room_offset: int) -> None:
        self.pool = self  # fetch_rows asks a placement's pool which parts it places
        self._places = places
        self._own = own
        self._room = room
        self._room_offset = room_offset
        self._used = 0
        self.outcome: dict[str, Any] = {"written": True, "placed": [], "refused": [],
                                        "lost": []}

    def places(self, part: int) -> bool:
        return self._places[part] is not None

    def arg(self, part: int) -> dict[str, Any]:
        return self._places[part]  # type: ignore[return-value]

    def index_share(self, ids: Tensor, positions: Tensor) -> Optional[dict[str, int]]:
        """A share written into the room, for its owner to read there
        (``None``: no room lent, or none left: it travels as tensors)."""
        count = ids.numel()
        if self._room is None or self._used + 2 * count > self._room.numel():
            return None
        start, self._used = self._used, self._used + 2 * count
        self._room[start:start + count].copy_(ids)
        self._room[start + count:start + 2 * count].copy_(positions)
        return {"offset": self._room_offset + 8 * start, "count": count}

    def placed(self, part: int) -> None:
        self.outcome["placed"].append(part)

    def refused(self, part: int) -> None:
        self.outcome["refused"].append(part)

    def lost(self, part: int) -> None:
        if part not in self.outcome["lost"]:
            self.outcome["lost"].append(part)

    def settle(self) -> None:
        pass  # the trainer closes its segment's descriptor


class TreeRowWriter:
    """Writes the rows of a homogeneous tree's nodes into its trainer's outputs.

    Args:
        part: The coordinator's part.
        reader: Its dataset (the node features' dtypes and shapes).
    """

    def __init__(self, part: int, reader: Any) -> None:
        self.part = part
        self._reader = reader

    def write(self, arg: dict[str, Any], shares: list[tuple[int, Tensor, Tensor]],
              num_nodes: int, router: Any, reply_limits: Sequence[Optional[int]],
              timeout: Optional[float], ctx: Optional[CallContext]) -> dict[str, list[int]]:
        """Has every row of ``attrs`` of the tree's nodes written (``shares``:
        the nodes grouped by owner, positions into the tree's nodes).

        Returns:
            The ``rows`` result: ``{"placed", "refused", "lost"}``, parts.

        Raises:
            SharedMemoryError: if this server cannot map the outputs (the
                trainer asks again without ``rows``).
            ProtocolError: if ``places`` does not have one entry per part,
                none for this one, or the outputs hold fewer rows than the
                tree has nodes.
            StoreError: on an attribute the graph does not have.
        """
        attrs, places = arg["attrs"], arg["places"]
        if len(places) != router.num_parts or places[self.part] is None:
            raise ProtocolError(f"'rows.places' must hold one entry per part "
                                f"({router.num_parts}), a place for the coordinator "
                                f"(part {self.part}) among them; got {describe(places)}")
        specs = self._reader.node_feature_specs(None)
        missing = [a for a in attrs if a not in specs]
        if missing:
            raise StoreError(f"no node feature {missing[0]!r} in this graph; it has "
                             f"{sorted(specs)[:16]}")
        if ctx is None:
            raise SharedMemoryError("a tree's rows are written into the trainer's memory: "
                                    "ask without 'rows'")
        own = places[self.part]
        outs = ctx.placed(own, [(DTYPES[specs[a]["dtype"]], specs[a]["shape"]) for a in attrs])
        room = None if "room" not in arg else ctx.placed_room(own, arg["room"])
        if outs[0].size(0) < num_nodes:
            # Lent for fewer nodes than the tree has: the trainer fetches them.
            return {"written": False, "placed": [self.part], "refused": [], "lost": []}
        placement = _Placement(places, self.part, room,
                               0 if room is None else arg["room"]["offset"])
        row_bytes = sum(math.prod(out.shape[1:]) * out.element_size() for out in outs)
        request = RowRequest(GET.name, {"groups": [{"group": None, "attrs": list(attrs)}]},
                             list(attrs), outs,
                             within_reply_limits(shares, row_bytes, reply_limits), placement)
        # The own share is served in process (OwnPartFirst, once the peers'
        # calls are out) with the request's context: into the same outputs.
        with router.client.lent(ctx):
            fetch_rows(router, [request], timeout=timeout, reply_limits=reply_limits)
        return placement.outcome
