"""The types of the ops' arguments, as values on the wire may have them.

Each op of :mod:`pyg_dist.protocol.ops` declares its arguments with these
(``"fanout": integer(-1, 1 << 31)``); the server checks every request
against them before its handler or cost estimate runs
(:meth:`~pyg_dist.rpc.op_spec.OpSpec.check_request`), and refuses one that
does not fit with a :class:`~pyg_dist.errors.ProtocolError` naming the op,
the argument (with the place inside it: ``'groups'[0].attrs``), what it must
be and what it was. The handlers then read their arguments without checking
their types again; what depends on the part's data (ids in range, owned
nodes, known attributes) and on several arguments together (one size per
edge type) they still check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.rpc.op_spec import ArgProblem, TensorCheck

MAX_NAME = 256
"""Longest name (node type, relation, attribute) an argument may hold."""


@dataclass(frozen=True)
class Form:
    """A value of one form, told by ``test``.

    Args:
        wanted: What it must be, in words (``"a bool"``).
        test: Whether a value is of the form.
    """

    wanted: str
    test: Callable[[Any], bool]

    def __call__(self, value: Any) -> Optional[ArgProblem]:
        return None if self.test(value) else ArgProblem("", self.wanted, value)


@dataclass(frozen=True)
class ListOf:
    """A list of ``low`` to ``high`` ``noun``, each of ``item``'s form."""

    item: Any  # Form, ListOf, MapOf or AnyOf
    low: int
    high: int
    noun: str = "entries"

    @property
    def wanted(self) -> str:
        """What it must be, in words."""
        return f"a list of {self.low} to {self.high} {self.noun} ({self.item.wanted} each)"

    def test(self, value: Any) -> bool:
        """Whether ``value`` is of the form (the fast path, per request)."""
        return isinstance(value, list) and self.low <= len(value) <= self.high and \
            all(map(self.item.test, value))

    def __call__(self, value: Any) -> Optional[ArgProblem]:
        if self.test(value):
            return None
        if not isinstance(value, list) or not self.low <= len(value) <= self.high:
            return ArgProblem("", self.wanted, value)
        for i, entry in enumerate(value):
            wrong = self.item(entry)
            if wrong is not None:
                return ArgProblem(f"[{i}]{wrong.path}", wrong.wanted, wrong.value)
        return None


@dataclass(frozen=True)
class MapOf:
    """A map of these keys (``required`` ones always), each of its form."""

    fields: Mapping[str, Any]
    required: Collection[str] = ()

    @property
    def wanted(self) -> str:
        """What it must be, in words."""
        needed = f", {list(self.required)} required" if self.required else ""
        return f"a map of {sorted(self.fields)} (no other key{needed})"

    def test(self, value: Any) -> bool:
        """Whether ``value`` is of the form (the fast path, per request)."""
        return isinstance(value, dict) and value.keys() <= self.fields.keys() and \
            all(k in value for k in self.required) and \
            all(self.fields[k].test(v) for k, v in value.items())

    def __call__(self, value: Any) -> Optional[ArgProblem]:
        if self.test(value):
            return None
        if not isinstance(value, dict) or not value.keys() <= self.fields.keys() or \
                any(k not in value for k in self.required):
            return ArgProblem("", self.wanted, value)
        for key, entry in value.items():
            wrong = self.fields[key](entry)
            if wrong is not None:
                return ArgProblem(f".{key}{wrong.path}", wrong.wanted, wrong.value)
        return None


@dataclass(frozen=True)
class AnyOf:
    """A value of any of ``forms`` (refused as the last one refuses it)."""

    forms: tuple

    @property
    def wanted(self) -> str:
        """What it must be, in words."""
        return " or ".join(f.wanted for f in self.forms)

    def test(self, value: Any) -> bool:
        """Whether ``value`` is of any of the forms."""
        return any(form.test(value) for form in self.forms)

    def __call__(self, value: Any) -> Optional[ArgProblem]:
        return None if self.test(value) else ArgProblem("", self.wanted, value)


def integer(low: int, high: int) -> Form:
    """An int in ``[low, high]`` (a bool is no int here: ``type(v) is int``)."""
    wanted = f"an int >= {low}" if high >= 1 << 62 else f"an int in [{low}, {high}]"
    return Form(wanted, lambda v: type(v) is int and low <= v <= high)


def seconds(high: float) -> Form:
    """A finite number of seconds in ``(0, high]``."""
    return Form(f"seconds in (0, {high:g}]",
                lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v) and 0 < v <= high)


def number(low: float, high: float, low_open: bool = False) -> Form:
    """A finite int or float in ``[low, high]`` (``(low, high]`` when
    ``low_open``; a bool is no number here)."""
    bound = f"({low:g}, {high:g}]" if low_open else f"[{low:g}, {high:g}]"
    return Form(f"a finite number in {bound}",
                lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v) and low <= v <= high and not (low_open and v == low))


def choice(values: Collection[str]) -> Form:
    """One of ``values``."""
    listed = list(values)
    return Form(f"one of {listed}", lambda v: isinstance(v, str) and v in listed)


def nil_or(form: Any) -> AnyOf:
    """Nil, or a value of ``form``."""
    return AnyOf((NIL, form))


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME


PLACE = Form("a map", lambda v: isinstance(v, dict))
"""Where a same-host server writes rows (``place``): its fields are checked
where they are used, by the shared-memory service, against the segments
the client lent."""
NIL = Form("nil", lambda v: v is None)
BOOL = Form("a bool", lambda v: isinstance(v, bool))
NAME = Form(f"a string of 1 to {MAX_NAME} characters", _is_name)
TYPED_EDGE = Form("[src, rel, dst] names",
                  lambda v: isinstance(v, list) and len(v) == 3 and all(map(_is_name, v)))
EDGE_TYPE = nil_or(TYPED_EDGE)
"""An edge type: nil (a homogeneous graph's one) or ``[src, rel, dst]``."""
NODE_TYPE = nil_or(NAME)
"""A node type: nil (a homogeneous graph's one) or its name."""
COUNT = integer(0, 1 << 62)
"""A count of ids, edges or rows."""
FANOUT = integer(-1, 1 << 31)
"""Neighbours to draw per seed (``-1``: all)."""


def sizes(high: int) -> ListOf:
    """One count of ids per entry (edge type, node type), at most ``high``."""
    return ListOf(COUNT, 1, high, "counts")


def ids_and(second: Optional[str], what: str) -> TensorCheck:
    """A request's tensors: the ids as one 1-D int64 tensor, and, when its
    argument ``second`` is given (not nil), ``what`` (one int64 per id) as a
    second one."""
    def check(args: dict[str, Any], tensors: list[Tensor]) -> Optional[str]:
        due = 2 if second is not None and args.get(second) is not None else 1
        if len(tensors) != due:
            then = f", then {what} ({second})" if second is not None else ""
            return f"takes {due} tensor(s) here (the ids{then}), got {len(tensors)}"
        for t, name in zip(tensors, ("the ids", what)):
            if t.dtype != torch.int64 or t.dim() != 1:
                return (f"takes {name} as a 1-D int64 tensor, got {t.dtype} of shape "
                        f"{list(t.shape)}")
        if due == 2 and tensors[1].numel() != tensors[0].numel():
            return (f"got {tensors[1].numel()} {what} for {tensors[0].numel()} ids; send one "
                    f"per id")
        return None
    return check


def ids_and_rows(what: str) -> TensorCheck:
    """A write's two tensors: the ids as one 1-D int64 tensor, then
    ``what``, one 2-D row per id (its dtype and width depend on the table
    written, checked by the handler)."""
    ids_only = ids_and(None, "")

    def check(args: dict[str, Any], tensors: list[Tensor]) -> Optional[str]:
        wrong = ids_only(args, tensors[:1])
        if wrong is not None:
            return wrong
        ids, rows = tensors
        if rows.dim() != 2 or rows.shape[0] != ids.numel():
            return (f"takes {what} as a 2-D tensor of one row per id ({ids.numel()}), got "
                    f"shape {list(rows.shape)}")
        return None
    return check


def ids_or_placed_index(what: str) -> TensorCheck:
    """``get``'s tensors: as :func:`ids_and` ``("place", what)``, or none
    at all when ``place`` names an ``index`` (the ids and ``what`` lie in
    the client's segment, checked by the shared-memory service where they
    are read)."""
    with_tensors = ids_and("place", what)

    def check(args: dict[str, Any], tensors: list[Tensor]) -> Optional[str]:
        place = args.get("place")
        if isinstance(place, dict) and "index" in place:
            return None if not tensors else (
                f"takes no tensors with 'place.index' (the ids and {what} lie in the "
                f"segment), got {len(tensors)}")
        return with_tensors(args, tensors)
    return check

