"""A batch's node rows written by its ``sample_tree`` (``rows``): one round trip a batch.

Without it a batch sampled on the servers costs its trainer one ``sample_tree``
and then one ``get`` per owning server. A trainer whose servers all run on
its host may instead lend the tree's coordinator the batch's outputs (a
segment of its :class:`~pyg_dist.rpc.shm.outputs.OutputPool`, sized for the
most nodes the tree can have) and ask, with ``rows``, for the rows of
``attrs`` of every node of the tree: once the hops are sampled, the
coordinator has each owner write its share of the rows into those outputs
(the owner's ``get`` with ``place``, the coordinator's own share in process)
and answers only when every row is written. The trainer then reads the
batch's features where they lie.

The argument (:data:`ROWS`): ``{"attrs": [names], "places": [one per part:
the ``place`` argument of a ``get`` to that part, or nil]}``. Only a
homogeneous tree asked with ``owners`` may ask for rows (its owner grouping
is what the coordinator sends each owner). The coordinator's own entry must
be a place: it maps the outputs first, so a trainer whose segment it cannot
map learns so before any peer is asked (``SharedMemoryError``: the trainer
asks again without ``rows``).

The outputs are lent before the tree's size is known: a tree with more nodes
than they hold has no rows written (``written: false``; the trainer fetches
them as usual), so a trainer may lend fewer rows than the fan-outs bound.

The result (:func:`check`): ``rows`` is ``{"written": bool, "placed":
[parts], "refused": [parts], "lost": [parts]}``: whether the rows were
written, the owners that wrote theirs in place, those that could not map
the outputs (the coordinator copied their rows in), and those whose first
attempt was lost (a late one may still write: the trainer never reuses that
segment). Written, every row is; a coordinator that cannot write them all
fails the tree.
"""

from __future__ import annotations

from typing import Any, Optional

from pyg_dist.protocol.schema import NAME, Form
from pyg_dist.rpc.wire_values import describe

MAX_PARTS = 1 << 15
"""Most parts a ``rows`` argument may name (a partition book's bound)."""

OUTCOMES = ("placed", "refused", "lost")
"""The keys of a ``rows`` result that hold a list of parts each."""


def asked(args: dict[str, Any]) -> bool:
    """Whether a tree request asks for its nodes' rows."""
    return "rows" in args


def _is_rows(value: Any) -> bool:
    if not isinstance(value, dict) or not {"attrs", "places"} <= set(value) <= \
            {"attrs", "places", "room"}:
        return False
    attrs, places = value["attrs"], value["places"]
    return isinstance(attrs, list) and 0 < len(attrs) <= 4096 and \
        all(NAME.test(a) for a in attrs) and \
        len(set(attrs)) == len(attrs) and isinstance(places, list) and \
        0 < len(places) <= MAX_PARTS and all(p is None or isinstance(p, dict) for p in places)


ROWS = Form("{attrs: 1 to 4,096 distinct names, places: one map or nil per part, "
            "optionally room: a map}", _is_rows)
"""The form of a tree request's ``rows`` argument (see the module)."""


def check(args: dict[str, Any], result: dict[str, Any]) -> Optional[str]:
    """The ``rows`` result of a tree asked with ``rows`` (see the module):
    lists of distinct parts that had a place, each part in one list at most."""
    rows = result.get("rows")
    places = args["rows"]["places"]
    if not isinstance(rows, dict) or set(rows) != {*OUTCOMES, "written"} or \
            not isinstance(rows["written"], bool):
        return (f"a 'rows' result {describe(rows)}, where {{written: a bool, placed, "
                f"refused, lost}} was due")
    seen: set[int] = set()
    for key in OUTCOMES:
        parts = rows[key]
        if not isinstance(parts, list) or not all(
                type(p) is int and 0 <= p < len(places) and places[p] is not None
                for p in parts):
            return f"'rows.{key}' {describe(parts)}, where parts that had a place were due"
        if seen & set(parts) or len(set(parts)) != len(parts):
            return f"'rows.{key}' names a part twice"
        seen |= set(parts)
    return None
