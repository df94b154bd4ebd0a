"""Every operation a partition server answers, declared once.

Each op is an :class:`~pyg_dist.rpc.op_spec.OpSpec`: its arguments with
their types (:mod:`pyg_dist.protocol.schema`), its tensors, its reply (result
keys; tensors checked by :mod:`pyg_dist.protocol.reply_checks`, a tree's by
:mod:`pyg_dist.protocol.tree_codec` and :mod:`pyg_dist.protocol.tree_owners`),
how many reply tensors a request may be answered with, and whether a call
may be sent again after a timeout or a lost connection. The transport
(:mod:`pyg_dist.rpc`) knows none of them: a
:class:`~pyg_dist.server.PartitionServer` gives :data:`PARTITION_OPS` to its
:class:`~pyg_dist.rpc.server.RpcServer`, which refuses a request that does
not fit before its handler runs; the trainer builds its calls with
``SAMPLE.request(part, {...}, [ids])`` and gives :data:`OPS` to its
:class:`~pyg_dist.rpc.retrying.RetryingClient`, which re-sends only
retry-safe ops and checks every reply before a caller sees it. So a call can
be followed by name: ``SAMPLE`` in :mod:`pyg_dist.hops.one_hop` is
answered by ``PartitionOps.sample``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from torch import Tensor

from pyg_dist.errors import ProtocolError
from pyg_dist.kernels import TEMPORAL_STRATEGIES
from pyg_dist.protocol import reply_checks as checks, tree_owners, tree_rows
from pyg_dist.protocol.schema import (
    BOOL,
    COUNT,
    EDGE_TYPE,
    FANOUT,
    NAME,
    NODE_TYPE,
    PLACE,
    TYPED_EDGE,
    AnyOf,
    Form,
    ListOf,
    MapOf,
    choice,
    ids_and,
    ids_and_rows,
    ids_or_placed_index,
    integer,
    nil_or,
    number,
    seconds,
    sizes,
)
from pyg_dist.rpc.op_spec import RPC_OPS, OpSpec, PartRequest
from pyg_dist.rpc.wire_format import MAX_TENSORS


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _sample_reply_tensors(args: dict[str, Any]) -> int:
    """``sample``: 3 tensors per edge type asked for."""
    return 3 * _length(args.get("edge_types"))


def _tree_reply_tensors(args: dict[str, Any]) -> int:
    """``sample_tree``: 3 per edge type, 2 per node type (at most 2 per edge
    type plus the seed types), the per-hop counts (and the owner order)."""
    edge_types = _length(args.get("edge_types"))
    node_types = 2 * edge_types + _length(args.get("seed_types"))
    return 3 * edge_types + 2 * node_types + 3 + MAX_TENSORS


def _get_reply_tensors(args: dict[str, Any]) -> int:
    """``get``: one per attribute of each of its node types."""
    groups = args.get("groups")
    if not isinstance(groups, list):
        return MAX_TENSORS
    return sum(_length(g.get("attrs")) if isinstance(g, dict) else 0 for g in groups)


# The table ##################################################################

MAX_HOPS = 16
"""Most hops one ``sample_tree`` may ask for."""
_TYPES = 4096  # most edge types, node types or groups one request may name
_SEED = nil_or(integer(-(1 << 63), (1 << 64) - 1))  # what torch.Generator.manual_seed takes
_DRAW = {"replace": BOOL, "weight_attr": nil_or(NAME), "time_attr": nil_or(NAME),
         "temporal_strategy": choice(TEMPORAL_STRATEGIES)}
_PAGE = {"edge_type": EDGE_TYPE, "start": COUNT, "count": nil_or(COUNT)}
_ATTRS = ListOf(NAME, 1, _TYPES, "names")


def _op(name: str, required: Optional[dict[str, Any]] = None,
        optional: Optional[dict[str, Any]] = None, **declared: Any) -> OpSpec:
    """An :class:`~pyg_dist.rpc.op_spec.OpSpec` whose arguments are named
    once, with their types (:mod:`pyg_dist.protocol.schema`)."""
    required, optional = required or {}, optional or {}
    return OpSpec(name, required=tuple(required), optional=tuple(optional),
                  types={**required, **optional}, **declared)


META = _op("meta", reply_check=checks.books)
SAMPLE = _op("sample",
             required={"edge_types": ListOf(EDGE_TYPE, 1, _TYPES, "edge types"),
                       "num_neighbors": AnyOf((FANOUT, ListOf(FANOUT, 1, _TYPES, "fan-outs")))},
             optional={"sizes": sizes(_TYPES), "seed": _SEED, **_DRAW},
             tensors=(1, 2), tensor_check=ids_and("time_attr", "seed times"),
             reply_check=checks.sample, reply_tensors=_sample_reply_tensors)
SAMPLE_TREE = _op(
    "sample_tree",
    required={"edge_types": AnyOf((Form("[nil] (a homogeneous graph)", lambda v: v == [None]),
                                   ListOf(TYPED_EDGE, 1, _TYPES, "edge types"))),
              "num_neighbors": ListOf(ListOf(FANOUT, 1, MAX_HOPS, "fan-outs"), 1, _TYPES,
                                      "fan-out lists"),
              "seed_types": ListOf(NODE_TYPE, 1, _TYPES, "node types"),
              "seed": integer(0, (1 << 63) - 1)},
    optional={"sizes": nil_or(sizes(_TYPES)), "disjoint": BOOL,
              "subgraph": choice(("directional", "induced")),
              "timeout": nil_or(seconds(86400)), **_DRAW,
              "temporal_strategy": nil_or(choice(TEMPORAL_STRATEGIES)), "owners": BOOL,
              "rows": tree_rows.ROWS},
    tensors=(1, 2), tensor_check=ids_and("time_attr", "seed times"), reply=("node_types",),
    reply_check=tree_owners.check, worker=True, reply_tensors=_tree_reply_tensors)
GET = _op("get",
          required={"groups": ListOf(MapOf({"group": NODE_TYPE, "attrs": _ATTRS},
                                           required=("attrs",)), 1, _TYPES, "groups")},
          optional={"sizes": sizes(_TYPES), "place": PLACE}, tensors=(0, 2),
          tensor_check=ids_or_placed_index("output rows"), reply=("groups",),
          reply_check=checks.get, reply_tensors=_get_reply_tensors)
SIZES = _op("sizes", optional={"group": NODE_TYPE}, reply=("sizes", "dtypes"))
EDGE_INDEX = _op("edge_index", optional=_PAGE, reply=("total",), reply_check=checks.aligned(3),
                 worker=True)
DEGREE = _op("degree", optional={"edge_type": EDGE_TYPE}, reply_check=checks.aligned(2))
STATS = _op("stats")
GET_EDGES = _op("get_edges", required={"attrs": _ATTRS}, optional={"edge_type": EDGE_TYPE},
                tensors=(1, 1),
                tensor_check=ids_and(None, ""), reply=("attrs",),
                reply_check=checks.get_edges)
EDGE_IDS = _op("edge_ids", optional=_PAGE, reply=("total",), reply_check=checks.aligned(1))

# Learnable embeddings (pyg_dist.server.embeddings): the only ops that write,
# so none is sent again after a lost answer (a late duplicate of a push would
# apply it twice), and those that change rows run in a worker.
TABLE_NAME = Form("1 to 64 letters, digits, '_', '.' or '-' (not starting with '.' or '-')",
                  lambda v: isinstance(v, str) and re.fullmatch(r"[\w][\w.-]{0,63}", v,
                                                                 re.ASCII) is not None)
"""An embedding table's name (it names a checkpoint file)."""
TABLE_DTYPES = ("float32", "bfloat16")
"""The dtypes an embedding table may have."""
_TABLE = {"name": TABLE_NAME}
_LAYOUT = {"dim": integer(1, 1 << 16), "dtype": choice(TABLE_DTYPES)}
OPTIMIZER_KINDS = ("sgd", "adam", "adagrad")
"""The optimisers a server applies (:mod:`pyg_dist.server.embedding_updates`)."""
_RATE = number(0.0, 1e6)
OPTIMIZER = MapOf({"kind": choice(OPTIMIZER_KINDS), "lr": number(0.0, 1e6, low_open=True),
                   "step": integer(1, 1 << 62),
                   "betas": ListOf(number(0.0, 1.0 - 1e-12), 2, 2, "numbers"),
                   "eps": number(0.0, 1.0, low_open=True), "lr_decay": _RATE,
                   "initial_accumulator_value": _RATE}, required=("kind", "lr"))
"""``emb_push``'s optimiser: its kind, learning rate and the kind's
hyper-parameters (the trainer's step count for Adam's bias correction and
Adagrad's decay)."""
EMB_CREATE = _op("emb_create",
                 required={**_TABLE, **_LAYOUT, "init": choice(("zeros", "uniform", "given"))},
                 optional={"group": NODE_TYPE, "seed": integer(0, (1 << 62) - 1),
                           "bound": number(0.0, 1e6, low_open=True)},
                 reply=("created", "ready", "rows"), retry_safe=False)
EMB_READ = _op("emb_read", required=_TABLE, optional={"place": PLACE, **_LAYOUT},
               tensors=(1, 2),
               tensor_check=ids_and("place", "output rows"), reply=("dim",),
               reply_check=checks.rows_of_ids)
EMB_WRITE = _op("emb_write", required=_TABLE, optional={"ready": BOOL}, tensors=(2, 2),
                tensor_check=ids_and_rows("rows"), reply=("rows",), retry_safe=False,
                worker=True)
EMB_PUSH = _op("emb_push", required={**_TABLE, "optimizer": OPTIMIZER}, tensors=(2, 2),
               tensor_check=ids_and_rows("gradients"), reply=("rows",), retry_safe=False,
               worker=True)
EMB_CHECKPOINT = _op("emb_checkpoint", reply=("tables",), retry_safe=False, worker=True)

PARTITION_OPS: Mapping[str, OpSpec] = {s.name: s for s in (
    META, SAMPLE, SAMPLE_TREE, GET, SIZES,
    EDGE_INDEX, DEGREE, STATS, GET_EDGES, EDGE_IDS, EMB_CREATE, EMB_READ, EMB_WRITE,
    EMB_PUSH, EMB_CHECKPOINT)}
"""The ops a partition server answers (:class:`pyg_dist.server.partition_ops.PartitionOps`),
besides :data:`~pyg_dist.rpc.op_spec.RPC_OPS`."""

OPS: Mapping[str, OpSpec] = {**RPC_OPS, **PARTITION_OPS}
"""Every declared op, by name."""


def wire_edge_type(edge_type: Optional[Sequence[str]]) -> Optional[list[str]]:
    """An edge type as a request writes it: nil (a homogeneous graph's one)
    or ``[src, rel, dst]`` (msgpack has no tuples)."""
    return None if edge_type is None else list(edge_type)


def sample_answer_bytes(seeds: int, neighbours: int) -> int:
    """Bytes of one edge type's ``sample`` answer: an int64 count per seed,
    an int64 neighbour and edge id per sampled neighbour (what its server
    checks against the reply limit, and a trainer lends memory for)."""
    return 8 * (seeds + 2 * neighbours)


def declared(part: int, op: str, args: Optional[dict[str, Any]] = None,
             tensors: Sequence[Tensor] = ()) -> PartRequest:
    """:meth:`~pyg_dist.rpc.op_spec.OpSpec.request` of the op named ``op``.

    Raises:
        ProtocolError: if no op of that name is declared, or as
            :meth:`~pyg_dist.rpc.op_spec.OpSpec.request`.
    """
    spec = OPS.get(op)
    if spec is None:
        raise ProtocolError(f"no op {op!r} is declared; the servers answer "
                            f"{sorted(OPS)}", op=op)
    return spec.request(part, args, tensors)
