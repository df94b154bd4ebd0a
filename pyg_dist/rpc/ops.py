"""Every operation a partition server answers, declared once.

An :class:`OpSpec` says what an operation takes (argument names, how many
tensors), what its reply holds (result keys, how many tensors, how their
lengths relate to the request's) and whether a call may be sent again after
a timeout or a lost connection (:attr:`OpSpec.retry_safe`). Three places use
the same declaration:

* the trainer builds its calls with :meth:`OpSpec.request` (``SAMPLE.request(
  part, {...}, [ids])``), which refuses an argument the op does not take;
* the server (:class:`~pyg_dist.rpc.server.RpcServer`, handlers from
  :meth:`pyg_dist.server.ops.PartitionOps.handlers`) refuses a request with
  unknown or missing arguments or the wrong number of tensors before its
  handler runs (:meth:`OpSpec.check_request`);
* the one retry layer (:class:`~pyg_dist.rpc.retrying.RetryingClient`)
  re-sends only :attr:`~OpSpec.retry_safe` ops and checks every reply's
  shape (:meth:`OpSpec.check_reply`) before a caller sees it, so a
  malformed reply fails as :class:`~pyg_dist.errors.ProtocolError` naming
  the op and the server, whatever store or sampler asked.

So a call can be followed by name: ``SAMPLE`` in
:mod:`pyg_dist.store.remote_sampling` is answered by
``PartitionOps.sample``. The handlers check values (id ranges, ownership,
dtypes) themselves; this table checks the shape of the conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

import torch
from torch import Tensor

from pyg_dist.errors import ProtocolError
from pyg_dist.rpc.messages import Reply
from pyg_dist.rpc.wire_values import describe


class PartRequest(NamedTuple):
    """One call to the server of ``part``: what :meth:`OpSpec.request` builds
    and :meth:`pyg_dist.store.routing.Router.call_all` sends."""

    part: int
    op: str
    args: dict[str, Any]
    tensors: list[Tensor]


ReplyCheck = Callable[[dict[str, Any], list[Tensor], dict[str, Any], list[Tensor]],
                      Optional[str]]
"""``check(args, tensors, result, reply_tensors) -> None`` or what is wrong."""


@dataclass(frozen=True)
class OpSpec:
    """The declaration of one operation.

    Args:
        name: The op's name on the wire.
        summary: One line on what it answers (``docs/wire-protocol.md``
            lists the same).
        required: Arguments every request names.
        optional: Arguments a request may name.
        tensors: Fewest and most request tensors.
        reply: Result keys every reply holds.
        reply_check: Checks the reply's tensors against the request (count,
            dimensions, lengths that must agree); ``None``: no tensors.
        retry_safe: Whether the op only reads, so that sending it again (to
            the same server or a replica) cannot change what anyone sees.
        worker: Served by a worker thread whatever the request's size (a
            few bytes may ask for a whole part).
    """

    name: str
    summary: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    tensors: tuple[int, int] = (0, 0)
    reply: tuple[str, ...] = ()
    reply_check: Optional[ReplyCheck] = field(default=None, compare=False)
    retry_safe: bool = True
    worker: bool = False

    def request(self, part: int, args: Optional[dict[str, Any]] = None,
                tensors: Sequence[Tensor] = ()) -> PartRequest:
        """A call of this op on the server of ``part``, its arguments checked.

        Raises:
            ProtocolError: on an argument the op does not take, a missing
                one, or the wrong number of tensors (a bug of the caller).
        """
        args = {} if args is None else args
        tensors = list(tensors)
        problem = self._request_problem(args, tensors)
        if problem is not None:
            raise ProtocolError(f"a {self.name!r} request {problem}", op=self.name)
        return PartRequest(part, self.name, args, tensors)

    def check_request(self, args: Any, tensors: Sequence[Tensor]) -> None:
        """Refuses a received request that does not fit the declaration.

        Raises:
            ProtocolError: naming the unknown or missing arguments or the
                tensor count.
        """
        problem = self._request_problem(args, tensors)
        if problem is not None:
            raise ProtocolError(f"{self.name!r} {problem}")

    def _request_problem(self, args: Any, tensors: Sequence[Tensor]) -> Optional[str]:
        if not isinstance(args, dict):
            return f"takes a map of arguments, got {describe(args)}"
        unknown = [k for k in args if k not in self.required and k not in self.optional]
        if unknown:
            taken = sorted(self.required + self.optional)
            return (f"has unknown arguments {describe(sorted(map(str, unknown)))}; it takes "
                    f"{taken or 'none'}")
        missing = [k for k in self.required if k not in args]
        if missing:
            return f"lacks the required arguments {missing}"
        low, high = self.tensors
        if not low <= len(tensors) <= high:
            wanted = str(low) if low == high else f"{low} to {high}"
            return f"takes {wanted} tensors, got {len(tensors)}"
        return None

    def check_reply(self, reply: Reply, args: dict[str, Any], tensors: Sequence[Tensor],
                    address: str) -> Reply:
        """``reply`` if it holds what the op answers to this request.

        Raises:
            ProtocolError: naming the op, the server and what was wrong.
        """
        result = reply.result
        problem: Optional[str] = None
        if not isinstance(result, dict):
            problem = f"a result that is not a map ({describe(result)})"
        else:
            missing = [k for k in self.reply if k not in result]
            if missing:
                problem = f"a result without {missing}"
            elif self.reply_check is None:
                if reply.tensors:
                    problem = f"{len(reply.tensors)} tensors, where it answers none"
            else:
                problem = self.reply_check(args, list(tensors), result, reply.tensors)
        if problem is None:
            return reply
        reply.release()
        raise ProtocolError(f"server {address} answered {self.name!r} with {problem}",
                            address=address, op=self.name)


# Reply checks ###############################################################


def _shape(t: Tensor) -> str:
    return f"{t.dtype} of shape {list(t.shape)}"


def _count(expected: int, tensors: list[Tensor]) -> Optional[str]:
    if len(tensors) != expected:
        return f"{len(tensors)} tensors, where {expected} were due"
    return None


def _rows(tensors: list[Tensor], num_rows: int) -> Optional[str]:
    for t in tensors:
        if t.dim() < 1 or t.shape[0] != num_rows:
            return f"a tensor {_shape(t)}, where {num_rows} rows were asked for"
    return None


def _ids_of(tensors: list[Tensor]) -> int:
    return tensors[0].numel() if tensors else 0


def _hops(num_seeds: Sequence[int], reply: list[Tensor]) -> Optional[str]:
    """Per entry, ``counts`` (one per seed) then neighbour and edge ids (as
    many as the counts add up to), all 1-D int64."""
    problem = _count(3 * len(num_seeds), reply)
    if problem is not None:
        return problem
    for i, seeds in enumerate(num_seeds):
        counts, nbrs, eids = reply[3 * i: 3 * i + 3]
        if any(t.dim() != 1 or t.is_floating_point() for t in (counts, nbrs, eids)):
            return (f"tensors {_shape(counts)}, {_shape(nbrs)}, {_shape(eids)}, where 1-D "
                    f"integer ones were due")
        if counts.numel() != seeds:
            return f"{counts.numel()} counts for {seeds} seeds"
        total = int(counts.sum()) if counts.numel() else 0
        if nbrs.numel() != total or eids.numel() != total:
            return (f"{nbrs.numel()} neighbours and {eids.numel()} edge ids, where its "
                    f"counts add up to {total}")
    return None


def _sample(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
            reply: list[Tensor]) -> Optional[str]:
    return _hops([_ids_of(tensors)], reply)


def _sample_types(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
                  reply: list[Tensor]) -> Optional[str]:
    return _hops(list(args["sizes"]), reply)


def _tree(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
          reply: list[Tensor]) -> Optional[str]:
    """``node, row, col, edge, num_sampled_nodes, num_sampled_edges`` (and
    ``batch`` when disjoint), 1-D int64 but ``row`` and ``col`` (int32,
    indices into the nodes); the edges index into the nodes,
    the seeds come first, and the per-hop counts add up (none for an
    induced subgraph)."""
    problem = _count(7 if args.get("disjoint") is True else 6, reply)
    if problem is not None:
        return problem
    # row and col index into the nodes: int32 halves their bytes.
    dtypes = [torch.int64, torch.int32, torch.int32] + [torch.int64] * (len(reply) - 3)
    if any(t.dim() != 1 or t.dtype != d for t, d in zip(reply, dtypes)):
        return (f"tensors {[_shape(t) for t in reply]}, where 1-D ones of "
                f"{[str(d) for d in dtypes]} were due")
    node, row, col, edge, per_hop_nodes, per_hop_edges = reply[:6]
    seeds = _ids_of(tensors)
    if row.numel() != col.numel() or row.numel() != edge.numel():
        return f"{row.numel()} rows, {col.numel()} columns and {edge.numel()} edge ids"
    if node.numel() < seeds or not torch.equal(node[:seeds], tensors[0].to(torch.int64)):
        return f"{node.numel()} nodes that do not start with the {seeds} seeds"
    if len(reply) == 7 and reply[6].numel() != node.numel():
        return f"{reply[6].numel()} batch entries for {node.numel()} nodes"
    for name, index in (("row", row), ("col", col)):
        if index.numel() and not 0 <= int(index.min()) <= int(index.max()) < node.numel():
            return f"{name} entries outside the {node.numel()} sampled nodes"
    if args.get("subgraph") == "induced":
        return None if not per_hop_nodes.numel() and not per_hop_edges.numel() else \
            "per-hop counts for an induced subgraph"
    hops = len(args["num_neighbors"])
    if per_hop_nodes.numel() != hops + 1 or per_hop_edges.numel() != hops \
            or int(per_hop_nodes.sum()) != node.numel() \
            or int(per_hop_edges.sum()) != row.numel() or int(per_hop_nodes[0]) != seeds:
        return (f"per-hop counts {per_hop_nodes.tolist()} (nodes) and "
                f"{per_hop_edges.tolist()} (edges) that do not add up to {node.numel()} nodes "
                f"and {row.numel()} edges over {hops} hops from {seeds} seeds")
    return None


def _get(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
         reply: list[Tensor]) -> Optional[str]:
    if "place" in args:  # the rows were written into the caller's outputs
        if result.get("placed") is not True or reply:
            return (f"{len(reply)} tensors and placed={describe(result.get('placed'))}, "
                    f"where it wrote its rows in place")
        return None
    return _count(len(args["attrs"]), reply) or _rows(reply, _ids_of(tensors))


def _get_types(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
               reply: list[Tensor]) -> Optional[str]:
    groups, sizes = args["groups"], args["sizes"]
    problem = _count(sum(len(g["attrs"]) for g in groups), reply)
    if problem is not None:
        return problem
    start = 0
    for group, size in zip(groups, sizes):
        attrs = len(group["attrs"])
        problem = _rows(reply[start:start + attrs], size)
        if problem is not None:
            return problem
        start += attrs
    return None


def _aligned(count: int) -> ReplyCheck:
    """``count`` 1-D tensors of one length."""
    def check(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
              reply: list[Tensor]) -> Optional[str]:
        problem = _count(count, reply)
        if problem is None and any(t.dim() != 1 or t.numel() != reply[0].numel()
                                   for t in reply):
            problem = f"tensors {[_shape(t) for t in reply]}, where 1-D ones of one length " \
                      f"were due"
        return problem
    return check


def _books(args: dict[str, Any], tensors: list[Tensor], result: dict[str, Any],
           reply: list[Tensor]) -> Optional[str]:
    # The partition books, one per node type: ``meta``'s whole answer (its
    # fields, the books against them) is read and checked in one piece by
    # pyg_dist.store.connect, which names what a server of another version
    # lacks.
    return None


# The table ##################################################################

PING = OpSpec("ping", "protocol version, server name, host and ops (and, asked, the "
              "byte budgets' usage)", optional=("usage",), reply=("version", "ops"))
RELEASE = OpSpec("release", "unmaps shared-memory segments a closing client lent",
                 required=("segments",), reply=("released",))
META = OpSpec("meta", "counts, feature specs, partition book(s), versions of the part",
              reply_check=_books)
SAMPLE = OpSpec("sample", "one hop of neighbours for owned seeds of one edge type",
                required=("num_neighbors",),
                optional=("replace", "seed", "edge_type", "weight_attr", "time_attr",
                          "temporal_strategy"),
                tensors=(1, 2), reply_check=_sample)
SAMPLE_TYPES = OpSpec("sample_types", "one hop over several edge types at once",
                      required=("edge_types", "sizes", "num_neighbors"),
                      optional=("replace", "seed", "weight_attr", "time_attr",
                                "temporal_strategy"),
                      tensors=(1, 2), reply_check=_sample_types)
SAMPLE_TREE = OpSpec("sample_tree", "every hop of a batch, forwarded among the servers "
                     "(the sampled subgraph, relabelled)",
                     required=("num_neighbors", "seed"),
                     optional=("replace", "disjoint", "subgraph", "timeout", "weight_attr",
                               "time_attr", "temporal_strategy"),
                     tensors=(1, 2), reply_check=_tree, worker=True)
GET = OpSpec("get", "feature rows of owned nodes of one node type (with ``place``, "
             "written into the caller's outputs at the given rows)",
             required=("attrs",), optional=("group", "place"), tensors=(1, 2),
             reply=("attrs",), reply_check=_get)
GET_TYPES = OpSpec("get_types", "feature rows of owned nodes of several node types",
                   required=("groups", "sizes"), tensors=(1, 1), reply=("groups",),
                   reply_check=_get_types)
SIZES = OpSpec("sizes", "the whole graph's size and dtype of every feature of a node type",
               optional=("group",), reply=("sizes", "dtypes"))
EDGE_INDEX = OpSpec("edge_index", "the part's edges of one edge type, global, paged",
                    optional=("edge_type", "start", "count"), reply=("total",),
                    reply_check=_aligned(3), worker=True)
DEGREE = OpSpec("degree", "in-degrees of the part's nodes for one edge type",
                optional=("edge_type",), reply_check=_aligned(2))
STATS = OpSpec("stats", "what get and get_edges served since the server started")
GET_EDGES = OpSpec("get_edges", "edge attribute rows by global edge id",
                   required=("attrs",), optional=("edge_type",), tensors=(1, 1),
                   reply=("attrs",), reply_check=_get)
EDGE_IDS = OpSpec("edge_ids", "the part's global edge ids of one edge type, paged",
                  optional=("edge_type", "start", "count"), reply=("total",),
                  reply_check=_aligned(1))

RPC_OPS: Mapping[str, OpSpec] = {s.name: s for s in (PING, RELEASE)}
"""The ops every :class:`~pyg_dist.rpc.server.RpcServer` answers itself."""

PARTITION_OPS: Mapping[str, OpSpec] = {s.name: s for s in (
    META, SAMPLE, SAMPLE_TYPES, SAMPLE_TREE, GET, GET_TYPES, SIZES, EDGE_INDEX, DEGREE, STATS,
    GET_EDGES, EDGE_IDS)}
"""The ops a partition server answers (:class:`pyg_dist.server.ops.PartitionOps`)."""

OPS: Mapping[str, OpSpec] = {**RPC_OPS, **PARTITION_OPS}
"""Every declared op, by name."""


def declared(part: int, op: str, args: Optional[dict[str, Any]] = None,
             tensors: Sequence[Tensor] = ()) -> PartRequest:
    """:meth:`OpSpec.request` of the op named ``op``.

    Raises:
        ProtocolError: if no op of that name is declared, or as
            :meth:`OpSpec.request`.
    """
    spec = OPS.get(op)
    if spec is None:
        raise ProtocolError(f"no op {op!r} is declared; the servers answer "
                            f"{sorted(OPS)}", op=op)
    return spec.request(part, args, tensors)
