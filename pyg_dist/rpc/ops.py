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
:mod:`pyg_dist.hops.one_hop` is answered by
``PartitionOps.sample``. The handlers check values (id ranges, ownership,
dtypes) themselves; this table checks the shape of the conversation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from torch import Tensor

from pyg_dist.errors import ProtocolError
from pyg_dist.rpc import reply_checks as checks
from pyg_dist.rpc.messages import Reply
from pyg_dist.rpc.protocol import MAX_TENSORS
from pyg_dist.rpc.reply_checks import ReplyCheck
from pyg_dist.rpc.wire_values import describe, error_text


class PartRequest(NamedTuple):
    """One call to the server of ``part``: what :meth:`OpSpec.request` builds
    and :meth:`pyg_dist.routing.id_router.Router.call_all` sends."""

    part: int
    op: str
    args: dict[str, Any]
    tensors: list[Tensor]





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
                try:
                    problem = self.reply_check(args, list(tensors), result, reply.tensors)
                except Exception as exc:  # noqa: BLE001 (whatever a reply made a check raise)
                    # A reply no check foresaw, or a check's own bug (one
                    # raised KeyError on get_edges' replies), fails the call
                    # all the same: raised as anything but an RpcError it
                    # left the call's future unfinished until its deadline.
                    problem = (f"a reply its check could not read ({type(exc).__name__}: "
                               f"{error_text(exc)})")
        if problem is None:
            return reply
        reply.release()
        raise ProtocolError(f"server {address} answered {self.name!r} with {problem}",
                            address=address, op=self.name)


# The table ##################################################################

PING = OpSpec("ping", "protocol version, server name, host and ops (and, asked, the "
              "byte budgets' usage)", optional=("usage",), reply=("version", "ops"))
RELEASE = OpSpec("release", "unmaps shared-memory segments a closing client lent",
                 required=("segments",), reply=("released",))
META = OpSpec("meta", "counts, feature specs, partition book(s), versions of the part",
              reply_check=checks.books)
SAMPLE = OpSpec("sample", "one hop of neighbours for owned seeds of one or more edge types",
                required=("edge_types", "num_neighbors"),
                optional=("sizes", "replace", "seed", "weight_attr", "time_attr",
                          "temporal_strategy"),
                tensors=(1, 2), reply_check=checks.sample)
SAMPLE_TREE = OpSpec(
    "sample_tree", "every hop of a batch, forwarded among the servers (the sampled "
    "subgraph, relabelled)",
    required=("edge_types", "num_neighbors", "seed_types", "seed"),
    optional=("sizes", "replace", "disjoint", "subgraph", "timeout", "weight_attr",
              "time_attr", "temporal_strategy"),
    tensors=(1, 2), reply=("node_types",), reply_check=checks.tree, worker=True)
GET = OpSpec("get", "feature rows of owned nodes of one or more node types (with "
             "``place``, of one, written into the caller's outputs at the given rows)",
             required=("groups",), optional=("sizes", "place"), tensors=(1, 2),
             reply=("groups",), reply_check=checks.get)
SIZES = OpSpec("sizes", "the whole graph's size and dtype of every feature of a node type",
               optional=("group",), reply=("sizes", "dtypes"))
EDGE_INDEX = OpSpec("edge_index", "the part's edges of one edge type, global, paged",
                    optional=("edge_type", "start", "count"), reply=("total",),
                    reply_check=checks.aligned(3), worker=True)
DEGREE = OpSpec("degree", "in-degrees of the part's nodes for one edge type",
                optional=("edge_type",), reply_check=checks.aligned(2))
STATS = OpSpec("stats", "what get and get_edges served since the server started")
GET_EDGES = OpSpec("get_edges", "edge attribute rows by global edge id",
                   required=("attrs",), optional=("edge_type",), tensors=(1, 1),
                   reply=("attrs",), reply_check=checks.get_edges)
EDGE_IDS = OpSpec("edge_ids", "the part's global edge ids of one edge type, paged",
                  optional=("edge_type", "start", "count"), reply=("total",),
                  reply_check=checks.aligned(1))

# Learnable embeddings (pyg_dist.server.embeddings): the only ops that write,
# so none is sent again after a lost answer (a late duplicate of a push would
# apply it twice), and those that change rows run in a worker.
EMB_CREATE = OpSpec("emb_create", "creates (or finds) a learnable embedding table over the "
                    "part's nodes of one node type",
                    required=("name", "dim", "dtype", "init"),
                    optional=("group", "seed", "bound"),
                    reply=("created", "ready", "rows"), retry_safe=False)
EMB_READ = OpSpec("emb_read", "rows of an embedding table for owned ids (with ``place``, "
                  "written into the caller's outputs at the given rows)",
                  required=("name",), optional=("place", "dtype", "dim"), tensors=(1, 2),
                  reply=("dim",),
                  reply_check=checks.rows_of_ids)
EMB_WRITE = OpSpec("emb_write", "sets rows of an embedding table (first values, load)",
                   required=("name",), optional=("ready",), tensors=(2, 2),
                   reply=("rows",), retry_safe=False, worker=True)
EMB_PUSH = OpSpec("emb_push", "one sparse optimiser step on rows of an embedding table",
                  required=("name", "optimizer"), tensors=(2, 2), reply=("rows",),
                  retry_safe=False, worker=True)
EMB_CHECKPOINT = OpSpec("emb_checkpoint", "writes the part's embedding tables to its "
                        "checkpoint directory now", reply=("tables",), retry_safe=False,
                        worker=True)

RPC_OPS: Mapping[str, OpSpec] = {s.name: s for s in (PING, RELEASE)}
"""The ops every :class:`~pyg_dist.rpc.server.RpcServer` answers itself."""

PARTITION_OPS: Mapping[str, OpSpec] = {s.name: s for s in (
    META, SAMPLE, SAMPLE_TREE, GET, SIZES,
    EDGE_INDEX, DEGREE, STATS, GET_EDGES, EDGE_IDS, EMB_CREATE, EMB_READ, EMB_WRITE,
    EMB_PUSH, EMB_CHECKPOINT)}
"""The ops a partition server answers (:class:`pyg_dist.server.ops.PartitionOps`)."""

OPS: Mapping[str, OpSpec] = {**RPC_OPS, **PARTITION_OPS}
"""Every declared op, by name."""


def reply_tensor_limit(op: str, args: Any) -> int:
    """Most tensors a reply to this request may carry, derived from the
    request: :data:`~pyg_dist.rpc.protocol.MAX_TENSORS` (64), or more for the
    ops that answer a few tensors per type asked for (``sample``: 3 per
    edge type; ``sample_tree``: 3 per edge type, 2 per node type, and
    the node types are at most 2 per edge type plus the seed types; ``get``:
    one per attribute of each of its node types). A reply is refused over it,
    before its tensors are built, and no earlier: a graph of 1,000 edge types
    is answered, not refused after the server did the work.
    """
    if not isinstance(args, dict):
        return MAX_TENSORS
    if op == SAMPLE.name:
        wanted = 3 * _length(args.get("edge_types"))
    elif op == SAMPLE_TREE.name:
        edge_types = _length(args.get("edge_types"))
        node_types = 2 * edge_types + _length(args.get("seed_types"))
        wanted = 3 * edge_types + 2 * node_types + 2 + MAX_TENSORS
    elif op == GET.name and isinstance(args.get("groups"), list):
        wanted = sum(_length(g.get("attrs")) if isinstance(g, dict) else 0
                     for g in args["groups"])
    else:
        return MAX_TENSORS
    return max(MAX_TENSORS, wanted)


def wire_edge_type(edge_type: Optional[Sequence[str]]) -> Optional[list[str]]:
    """An edge type as a request writes it: nil (a homogeneous graph's one)
    or ``[src, rel, dst]`` (msgpack has no tuples)."""
    return None if edge_type is None else list(edge_type)


def sample_answer_bytes(seeds: int, neighbours: int) -> int:
    """Bytes of one edge type's ``sample`` answer: an int64 count per seed,
    an int64 neighbour and edge id per sampled neighbour (what its server
    checks against the reply limit, and a trainer lends memory for)."""
    return 8 * (seeds + 2 * neighbours)


def tree_answer_bytes(nodes: int, edges: int, hops: int, disjoint: bool) -> int:
    """Bytes of a homogeneous ``sample_tree`` answer: an int64 id (and
    batch entry, when disjoint) per node, int32 row and col and an int64
    id per edge, and the per-hop counts."""
    return sample_answer_bytes((2 if disjoint else 1) * nodes + 2 * hops + 1, edges)


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


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
