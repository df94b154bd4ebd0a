"""Node features on a partition server: ``get`` and ``sizes``.

``get`` answers rows of node features for global ids this part owns, for
one or more node types at once (``groups``: a heterogeneous batch asks each
server once; a homogeneous graph's one node type is ``group`` nil). One
path, :meth:`NodeFeatureOps._serve_rows`, checks the answer against the
reply limit, allocates every output at once through the call context
(memory the client lent, when it did) and counts what was served for
``stats``.

A ``get`` with a ``place`` argument comes from a trainer on this host that
allocated the batch's outputs in shared memory it lent every server
(:mod:`pyg_dist.rpc.shm.outputs`): its second tensor gives the row of the
outputs each id's row goes to, and the rows are written there
(:func:`~pyg_dist.kernels.place_rows.place_rows`); the reply carries no
tensors, only ``placed: true``. The trainer writes the ids and those rows
into the segment too, after the outputs (``place.index``), so a placed
``get`` sends no tensors either: a products-shaped batch's ~2 MB of them
no longer cross the trainer's socket.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

from pyg_dist.errors import ProtocolError, StoreError
from pyg_dist.kernels.place_rows import place_rows
from pyg_dist.partitioning import PartitionReader
from pyg_dist.protocol import ops
from pyg_dist.rpc.context import CallContext, uses_context
from pyg_dist.rpc.wire_format import DTYPES
from pyg_dist.rpc.wire_values import describe
from pyg_dist.server.requests import (
    attrs_arg,
    check_range,
    split_by_sizes,
)
from pyg_dist.store.local import PartitionFeatureStore

Result = tuple[dict[str, Any], list[Tensor]]

PLACED_CHARGE = (1 << 20) + 1
"""Most a placed ``get`` charges to its client's reply budget while it runs,
by default: just over the default ``inline_reply_bytes``, so that a big
placement goes to a worker without holding budget for bytes no reply
carries (:meth:`NodeFeatureOps.bound_placed_charge` fits it to a server's
configuration)."""


class NodeFeatureOps:
    """The node feature ops of one part.

    Args:
        reader: The dataset (feature specs per node type).
        feature_store: The part's PyG feature store, indexed by local row.
        type_nodes: Node type -> nodes of that type in the whole graph.
        index_of: Node type -> its :class:`~pyg_dist.server.requests.LocalIndex`.
        ids_of: ``(tensors, index)`` -> the local rows of a request's one id
            tensor, checked (dtype, shape, ownership).
        check_reply: ``(bytes, op, hint)``: refuses an answer over the
            server's reply limit.
    """

    def __init__(self, reader: PartitionReader, feature_store: FeatureStore,
                 type_nodes: dict[Optional[str], int], index_of: Callable[..., Any],
                 ids_of: Callable[..., Tensor], check_reply: Callable[..., None]) -> None:
        self.reader = reader
        self.features = feature_store
        self._type_nodes = type_nodes
        self._index_of = index_of
        self._ids_of = ids_of
        self._check_reply = check_reply
        # (group, *attrs) -> get's checked plan; filled by the estimate, used
        # again by the handler.
        self._plans: dict[tuple, tuple] = {}
        # What `get` served, for `stats` (a trainer-side cache is judged by
        # the bytes the servers did not have to send).
        self._lock = threading.Lock()
        self._served = {"get_calls": 0, "get_rows": 0, "get_bytes": 0}
        self._placed_charge = PLACED_CHARGE

    def bound_placed_charge(self, inline_reply_bytes: int, *budgets: int) -> None:
        """A placed ``get`` charges at most just over ``inline_reply_bytes``
        (enough to be served by a worker) and never more than ``budgets``
        (the client's and the server's reply budgets: a charge over them
        would refuse a placement that holds no reply at all)."""
        self._placed_charge = max(0, min(int(inline_reply_bytes) + 1, *map(int, budgets)))

    def handlers(self) -> dict[str, Any]:
        """Operation name -> handler."""
        return {ops.GET.name: self.get, ops.SIZES.name: self.sizes}

    def estimators(self) -> dict[str, Any]:
        """Operation name -> bytes of its answer."""
        return {ops.GET.name: self.get_bytes}

    def served(self) -> dict[str, int]:
        """``get_calls``, ``get_rows``, ``get_bytes`` served so far."""
        with self._lock:
            return dict(self._served)

    def specs(self, group: Optional[str]) -> dict[str, dict[str, Any]]:
        try:
            return self.reader.node_feature_specs(group)
        except Exception as exc:
            raise StoreError(f"no node type {describe(group)} in this graph") from exc

    def type_features(self, node_type: Optional[str]) -> dict[str, dict[str, Any]]:
        size = self._type_nodes[node_type]
        return {name: {**spec, "size": [size, *spec["shape"]]}
                for name, spec in self.specs(node_type).items()}

    def _get_plan(self, args: dict[str, Any]) -> tuple[Optional[str], list[str],
                                                      dict[str, dict[str, Any]], int]:
        """Checks one group of a ``get``: ``(group, attrs, specs, bytes per row)``."""
        group = args.get("group")
        key = (group, *args["attrs"])
        plan = self._plans.get(key)
        if plan is not None:  # the estimate checked these arguments just before
            return plan
        specs = self.specs(group)
        attrs, row_bytes = attrs_arg(args, specs, "feature", f"node type {describe(group)}")
        plan = (group, attrs, specs, row_bytes)
        if len(self._plans) < 256:  # clients choose attrs: keep the memo small
            self._plans[key] = plan
        return plan

    def get_bytes(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """Bytes of ``get``'s answer (every group's rows times its attributes'
        row bytes).

        Raises:
            ProtocolError: if the answer would exceed the reply limit, or
                the arguments are malformed.
            StoreError: on features this part does not hold.
        """
        if "place" in args:
            return self._placed_bytes(args, tensors)
        answer = sum(ids.numel() * plan[3] for plan, ids in self._groups(args, tensors))
        self._check_reply(answer, "get", "ask for fewer ids per request")
        return answer

    def _placed_bytes(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """A placed ``get``'s estimate: the bytes it writes into the
        client's memory, at most :data:`PLACED_CHARGE` or what
        :meth:`bound_placed_charge` set (its reply holds nothing).
        Nonzero so that a placement of more than ``inline_reply_bytes`` is
        served by a worker, as it was when its ids travelled as tensors (over
        ``inline_bytes``): a batch's row copy on the I/O thread would hold
        up every other client's request."""
        index = args["place"].get("index") if isinstance(args["place"], dict) else None
        count = index.get("count") if isinstance(index, dict) else \
            tensors[0].numel() if tensors else 0
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return 0  # malformed: the handler refuses it
        if len(args["groups"]) != 1:
            return 0  # likewise
        return min(count * self._get_plan(args["groups"][0])[3], self._placed_charge)

    @uses_context
    def get(self, args: dict[str, Any], tensors: list[Tensor], ctx: CallContext) -> Result:
        """Rows of features of one or more node types: ``groups``, a list of
        ``{"group", "attrs"}`` (``group`` nil: a homogeneous graph's one node
        type), and ``sizes``, ids per group (one group may leave it out: it
        has every id). The ids travel as one tensor, group after group; the
        answer is every group's attribute tensors in that order, written
        into the outputs the call context allocates (memory the client lent,
        when it did). With ``place`` (one group), see the module; a
        ``place`` with ``index`` carries no tensors: the ids and output rows
        lie in the client's segment (:meth:`CallContext.placed_index
        <pyg_dist.rpc.context.CallContext.placed_index>`)."""
        placed = "place" in args
        if placed and isinstance(args["place"], dict) and "index" in args["place"]:
            # The ids and their output rows lie in the segment (the op's
            # declaration let no tensors through): copied out before use.
            tensors = list(ctx.placed_index(args["place"]))
        planned = self._groups(args, tensors[:1])
        if placed:
            return self._place(planned, args, tensors, ctx)
        rows = [(plan, self._ids_of([ids], self._index_of(plan[0]))) for plan, ids in planned]
        return {"groups": len(rows)}, self._serve_rows(rows, ctx)

    def _groups(self, args: dict[str, Any], tensors: list[Tensor]
                ) -> list[tuple[tuple, Tensor]]:
        """``get``'s groups checked: ``[(plan, the group's ids)]`` (the ids'
        dtype and ownership are checked when they are looked up)."""
        groups = args["groups"]
        if "sizes" not in args and len(groups) == 1:
            return [(self._get_plan(groups[0]), tensors[0])]
        slices = split_by_sizes(args, tensors, len(groups), "get")
        return [(self._get_plan(group), ids) for group, (ids,) in zip(groups, slices)]

    def _place(self, planned: list[tuple[tuple, Tensor]], args: dict[str, Any],
               tensors: list[Tensor], ctx: CallContext) -> Result:
        """``get`` into the outputs a ``place`` argument names (see the module)."""
        if len(planned) != 1:
            raise ProtocolError(f"a 'get' with 'place' names one group (its outputs are one "
                                f"node type's), got {len(planned)}")
        (group, attrs, specs, row_bytes), ids = planned[0]
        rows = self._ids_of([ids], self._index_of(group))
        positions = tensors[1]
        outs = ctx.placed(args["place"], [(DTYPES[specs[a]["dtype"]], specs[a]["shape"])
                                          for a in attrs])
        # Out of range would write outside the outputs, so it is refused;
        # a repeated position only overwrites the client's own row.
        check_range(positions, outs[0].size(0), "output row")
        with self._lock:
            self._served["get_calls"] += 1
            self._served["get_rows"] += rows.numel()
            self._served["get_bytes"] += rows.numel() * row_bytes
        for name, out in zip(attrs, outs):
            if isinstance(self.features, PartitionFeatureStore):
                whole = self.features.get_tensor(TensorAttr(group, name, None))
                if whole.dtype == out.dtype:
                    place_rows(out, positions, whole, rows)
                    continue
                gathered = whole.index_select(0, rows)
            else:
                gathered = self.features.get_tensor(TensorAttr(group, name, rows.long()))
            place_rows(out, positions, gathered.to(out.dtype))
        return {"groups": 1, "placed": True}, []

    def _serve_rows(self, planned: list[tuple[tuple, Tensor]],
                    ctx: CallContext) -> list[Tensor]:
        """Gathers the rows of every ``(plan, rows)`` into outputs the call
        context allocates at once (the lent memory, when there is some)."""
        answer = sum(rows.numel() * plan[3] for plan, rows in planned)
        self._check_reply(answer, "get", "ask for fewer ids per request")
        with self._lock:
            self._served["get_calls"] += 1
            self._served["get_rows"] += sum(rows.numel() for _, rows in planned)
            self._served["get_bytes"] += answer
        outs = iter(ctx.alloc([(DTYPES[specs[a]["dtype"]], (rows.numel(), *specs[a]["shape"]))
                               for (_, attrs, specs, _), rows in planned for a in attrs]))
        return [self._rows(group, name, rows, next(outs))
                for (group, attrs, _, _), rows in planned for name in attrs]

    def _rows(self, group: Optional[str], name: str, rows: Tensor,
              out: Optional[Tensor] = None) -> Tensor:
        if isinstance(self.features, PartitionFeatureStore):
            # Our own stores hand out the whole tensor without a copy, and
            # index_select gathers rows about 5-10x faster than the advanced
            # indexing behind FeatureStore.get_tensor(index=...).
            whole = self.features.get_tensor(TensorAttr(group, name, None))
            if out is not None and whole.dtype == out.dtype:
                return torch.index_select(whole, 0, rows, out=out)
            gathered = whole.index_select(0, rows)
        else:
            # A plugin's store is promised int64 indices, as PyG's loaders give.
            gathered = self.features.get_tensor(TensorAttr(group, name, rows.long()))
        return gathered if out is None else out.copy_(gathered)

    def sizes(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """``{"sizes": {name: [num_nodes, *shape]}, "dtypes": {name: dtype}}``."""
        group = args.get("group")
        specs = self.specs(group)
        size = self._type_nodes.get(group, 0)
        return {"sizes": {n: [size, *s["shape"]] for n, s in specs.items()},
                "dtypes": {n: s["dtype"] for n, s in specs.items()}}, []

