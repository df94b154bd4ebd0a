"""Learnable embedding tables on a partition server: ``emb_create``,
``emb_read``, ``emb_write``, ``emb_push``, ``emb_checkpoint``.

A table holds one row per node of one node type that this part owns (its
rows in the order of the part's sorted global ids, as every feature), in
float32 or bfloat16, with the per-row state of the optimiser that updates
it (:mod:`pyg_dist.server.embedding_updates`). The trainer's side is
:class:`pyg_dist.DistEmbedding` and :mod:`pyg_dist.optim`.

These are the only ops that change what a server holds, so they are
checked hardest: a table name is a short plain word (it names a file), a
dimension and the memory of all tables are bounded, ids must be owned and
(for writes) unique, rows and gradients must have the table's shape and be
finite. A read-only server (``read_only=True``, ``pyg-dist serve
--read-only``) refuses every write and serves the tables it loaded from its
checkpoint. With a checkpoint directory the tables are written there
periodically and on stop (:mod:`pyg_dist.server.embedding_checkpoint`), and
loaded from there on start.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from pyg_dist.errors import EmbeddingError, ProtocolError
from pyg_dist.kernels.distinct import all_distinct
from pyg_dist.kernels.place_rows import place_rows
from pyg_dist.protocol import ops
from pyg_dist.rpc.context import CallContext, uses_context
from pyg_dist.rpc.wire_values import describe
from pyg_dist.server.embedding_updates import (
    STATE_KEYS,
    Optimizer,
    apply_update,
    new_state,
)
from pyg_dist.server.requests import check_range

logger = logging.getLogger(__name__)

Result = tuple[dict[str, Any], list[Tensor]]

TABLE_DTYPES = {name: getattr(torch, name) for name in ops.TABLE_DTYPES}
"""The dtypes a table may have."""
MAX_TABLES = 64
DEFAULT_MAX_BYTES = 1 << 34
"""Memory all tables of one server may take with their optimiser state."""


@dataclass
class EmbeddingTable:
    """One table of one part.

    Args:
        name: The table's name (a file name in checkpoints).
        group: Its node type (``None`` on a homogeneous graph).
        weight: ``[rows owned, dim]``.
        ready: Whether its first rows are in (``init="given"`` waits for
            the creating trainer's writes).
        updates: Pushes and writes applied since it was created.
        state: The optimiser state, ``{kind: {key: tensor}}``.
    """

    name: str
    group: Optional[str]
    weight: Tensor
    ready: bool = True
    updates: int = 0
    state: dict[str, dict[str, Tensor]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def dim(self) -> int:
        return int(self.weight.shape[1])

    @property
    def dtype_name(self) -> str:
        return str(self.weight.dtype).removeprefix("torch.")

    def nbytes(self) -> int:
        """The bytes of its rows and state."""
        return self.weight.numel() * self.weight.element_size() + sum(
            t.numel() * t.element_size() for s in self.state.values() for t in s.values())


def table_name(value: Any) -> str:
    """A table name read from a checkpoint, checked as requests' are
    (:data:`pyg_dist.protocol.ops.TABLE_NAME`: it names a checkpoint file)."""
    if ops.TABLE_NAME(value) is not None:
        raise ProtocolError(f"an embedding table's name must be {ops.TABLE_NAME.wanted}, got "
                            f"{describe(value)}")
    return value


class EmbeddingOps:
    """The embedding tables of one part and their ops.

    Args:
        part: The part served.
        index_of: Node type -> its :class:`~pyg_dist.server.requests.LocalIndex`
            (raises on an unknown type).
        check_reply: ``(bytes, op, hint)``: refuses an answer over the
            server's reply limit.
        read_only: Refuse every write.
        max_bytes: Memory all tables (with their state) may take.
    """

    def __init__(self, part: int, index_of: Callable[[Optional[str]], Any],
                 check_reply: Callable[..., None], *, read_only: bool = False,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.part = part
        self._index_of = index_of
        self._check_reply = check_reply
        self.read_only = read_only
        self.max_bytes = int(max_bytes)
        self.tables: dict[str, EmbeddingTable] = {}
        self._lock = threading.Lock()  # the table map; each table has its own
        self.changed = threading.Event()  # set by every write, for checkpoints
        # Writes the tables to disk now (set by a server given a checkpoint
        # directory: pyg_dist.server.embedding_checkpoint).
        self.checkpointer: Optional[Callable[[], dict[str, Any]]] = None

    def handlers(self) -> dict[str, Any]:
        """Operation name -> handler."""
        return {ops.EMB_CREATE.name: self.create, ops.EMB_READ.name: self.read,
                ops.EMB_WRITE.name: self.write, ops.EMB_PUSH.name: self.push,
                ops.EMB_CHECKPOINT.name: self.checkpoint}

    def estimators(self) -> dict[str, Any]:
        """Operation name -> bytes of its answer."""
        return {ops.EMB_READ.name: self.read_bytes}

    # Checks ################################################################

    def _table(self, args: dict[str, Any], *, ready: bool = True) -> EmbeddingTable:
        name = args["name"]
        table = self.tables.get(name)
        if table is None:
            raise EmbeddingError(f"part {self.part} has no embedding table {name!r}; create "
                                 f"it with pyg_dist.DistEmbedding first (it has "
                                 f"{sorted(self.tables)})")
        if ready and not table.ready:
            raise EmbeddingError(f"embedding table {name!r} on part {self.part} is still "
                                 f"being initialised by the trainer that created it; retry")
        return table

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise EmbeddingError(f"part {self.part} is served read-only and refuses to "
                                 f"{what}; serve it without --read-only to train embeddings")

    def _rows_of(self, table: EmbeddingTable, tensors: list[Tensor], unique: bool) -> Tensor:
        index = self._index_of(table.group)  # the ids' form: checked by the op's tensor_check
        rows = index.rows(tensors[0], index.num_nodes).long()
        if unique and not all_distinct(rows, table.weight.shape[0]):
            raise EmbeddingError(f"a write to embedding table {table.name!r} names an id "
                                 f"twice; sum the gradients of repeated ids first")
        return rows

    @staticmethod
    def _values(table: EmbeddingTable, tensors: list[Tensor], num_rows: int,
                what: str, dtypes: tuple[torch.dtype, ...]) -> Tensor:
        values = tensors[1]
        if values.dtype not in dtypes or list(values.shape) != [num_rows, table.dim]:
            raise EmbeddingError(
                f"{what} for embedding table {table.name!r} must be {[str(d) for d in dtypes]}"
                f" of shape [{num_rows}, {table.dim}], got {values.dtype} of shape "
                f"{list(values.shape)}")
        # Finite rows of float32 (or bfloat16) sum to a finite float64 (at
        # most 3.4e38 each), and a NaN or an infinity makes the sum NaN or
        # infinite: one reduction instead of a mask of the values.
        if values.numel() and not math.isfinite(float(values.sum(dtype=torch.float64))):
            raise EmbeddingError(f"{what} for embedding table {table.name!r} hold NaN or "
                                 f"infinite values; nothing was applied")
        return values

    # Operations ############################################################

    def create(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """Creates table ``name`` over the part's nodes of ``group``, or finds
        it (same dim, dtype and node type): ``{created, ready, rows}``."""
        name, group = args["name"], args.get("group")
        dim, dtype, init = args["dim"], args["dtype"], args["init"]  # checked: EMB_CREATE
        index = self._index_of(group)
        with self._lock:
            table = self.tables.get(name)
            if table is not None:
                if (table.group, table.dim, table.dtype_name) != (group, dim, dtype):
                    raise EmbeddingError(
                        f"embedding table {name!r} exists on part {self.part} for node type "
                        f"{describe(table.group)} with dim {table.dim} and dtype "
                        f"{table.dtype_name}; asked for {describe(group)}, {dim}, {dtype}: "
                        f"choose another name")
                return {"created": False, "ready": table.ready,
                        "rows": table.weight.shape[0]}, []
            self._writable(f"create embedding table {name!r}")
            rows = int(index.node_ids.numel())
            self._check_room(name, rows * dim * (TABLE_DTYPES[dtype].itemsize + 8))
            weight = self._initial(args, rows, dim, TABLE_DTYPES[dtype], init)
            self.tables[name] = EmbeddingTable(name, group, weight, ready=init != "given")
        self.changed.set()
        logger.info("part %d: created embedding table %r (%d rows of %d, %s, %s)",
                    self.part, name, rows, dim, dtype, init)
        return {"created": True, "ready": init != "given", "rows": rows}, []

    def _check_room(self, name: str, nbytes: int, new: bool = True) -> None:
        """Refuses a table (``new``) or state that would take the server past
        its bounds (the caller holds the table map's lock)."""
        held = sum(t.nbytes() for t in self.tables.values())
        if (new and len(self.tables) >= MAX_TABLES) or held + nbytes > self.max_bytes:
            raise EmbeddingError(
                f"part {self.part} cannot hold embedding table {name!r}: it has "
                f"{len(self.tables)} tables of {held} bytes and allows {MAX_TABLES} tables "
                f"of {self.max_bytes} bytes with their optimiser state")

    def _initial(self, args: dict[str, Any], rows: int, dim: int, dtype: torch.dtype,
                 init: str) -> Tensor:
        if init != "uniform":
            return torch.zeros(rows, dim, dtype=dtype)
        bound = args.get("bound", 1.0 / math.sqrt(dim))
        seed = args.get("seed", 0)
        generator = torch.Generator().manual_seed(seed * 65537 + self.part)
        weight = torch.rand(rows, dim, generator=generator).mul_(2 * bound).sub_(bound)
        return weight.to(dtype)

    def read_bytes(self, args: dict[str, Any], tensors: list[Tensor]) -> int:
        """Bytes of ``emb_read``'s answer (none when it writes the rows into
        the caller's outputs: ``place``)."""
        table = self._table(args, ready=False)
        if "place" in args:
            return 0
        answer = (tensors[0].numel() if tensors else 0) * table.dim \
            * table.weight.element_size()
        self._check_reply(answer, "emb_read", "ask for fewer ids per request")
        return answer

    @uses_context
    def read(self, args: dict[str, Any], tensors: list[Tensor],
             ctx: Optional[CallContext] = None) -> Result:
        """The rows of the ids (owned, repeats allowed), in their order,
        written into the outputs the call context allocates (memory a
        same-host client lent, when it did); with ``place`` (a trainer on
        this host), into the rows of its batch's output that the second
        tensor names, as a placed ``get`` does."""
        table = self._table(args)
        self._check_layout(table, args)
        if "place" in args:
            return self._place(table, args, tensors, ctx)
        rows = self._rows_of(table, tensors, unique=False)
        self.read_bytes(args, tensors)
        shape = (rows.numel(), table.dim)
        out = ctx.alloc([(table.weight.dtype, shape)])[0] if ctx is not None else \
            torch.empty(shape, dtype=table.weight.dtype)
        with table.lock:  # never half of a push
            torch.index_select(table.weight, 0, rows, out=out)
        return {"dim": table.dim, "updates": table.updates}, [out]

    @staticmethod
    def _check_layout(table: EmbeddingTable, args: dict[str, Any]) -> None:
        """Refuses a read that expects rows of another dtype or width (a
        table of that name made otherwise, by another trainer or before a
        restart): a placed read would write rows of the wrong size."""
        dtype, dim = args.get("dtype", table.dtype_name), args.get("dim", table.dim)
        if dtype != table.dtype_name or dim != table.dim:
            raise EmbeddingError(f"embedding table {table.name!r} holds rows of {table.dim} "
                                 f"{table.dtype_name}, not {describe(dim)} {describe(dtype)}: "
                                 f"it was created otherwise; choose another name")

    def _place(self, table: EmbeddingTable, args: dict[str, Any], tensors: list[Tensor],
               ctx: Optional[CallContext]) -> Result:
        """``emb_read`` into the output a ``place`` argument names."""
        if ctx is None:
            raise ProtocolError("an 'emb_read' with 'place' is served over the wire only")
        rows = self._rows_of(table, tensors, unique=False)
        positions = tensors[1]
        out = ctx.placed(args["place"], [(table.weight.dtype, (table.dim,))])[0]
        # Out of range would write outside the output, so it is refused; a
        # repeated position only overwrites the client's own row.
        check_range(positions, out.size(0), "output row")
        with table.lock:  # never half of a push
            place_rows(out, positions, table.weight, rows)
        return {"dim": table.dim, "updates": table.updates, "placed": True}, []

    def write(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """Sets rows (owned, unique ids; the table's dtype or float32);
        ``ready: true`` opens a table created with ``init="given"``."""
        self._writable("write embedding rows")
        table = self._table(args, ready=False)
        rows = self._rows_of(table, tensors, unique=True)
        values = self._values(table, tensors, rows.numel(), "rows",
                              (torch.float32, table.weight.dtype))
        ready = args.get("ready", False)
        with table.lock:
            table.weight.index_copy_(0, rows, values.to(table.weight.dtype))
            table.updates += 1
            table.ready = table.ready or ready
        self.changed.set()
        return {"rows": rows.numel()}, []

    def push(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """One optimiser step (``optimizer``) on the rows of the ids (owned,
        unique) with their float32 gradients."""
        self._writable("update embedding rows")
        opt = Optimizer.from_args(args["optimizer"])
        table = self._table(args)
        rows = self._rows_of(table, tensors, unique=True)
        grads = self._values(table, tensors, rows.numel(), "gradients", (torch.float32,))
        state = table.state.get(opt.kind)
        if state is None and STATE_KEYS[opt.kind]:
            with self._lock:
                self._check_room(table.name, 4 * table.weight.numel()
                                 * len(STATE_KEYS[opt.kind]), new=False)
                state = table.state.setdefault(
                    opt.kind, new_state(opt, table.weight.shape[0], table.dim))
        with table.lock:
            apply_update(table.weight, state or {}, rows, grads, opt)
            table.updates += 1
        self.changed.set()
        return {"rows": rows.numel(), "updates": table.updates}, []

    def checkpoint(self, args: dict[str, Any], tensors: list[Tensor]) -> Result:
        """Writes the tables to the server's checkpoint directory now."""
        self._writable("write a checkpoint")
        if self.checkpointer is None:
            raise EmbeddingError(f"part {self.part} has no checkpoint directory; serve it "
                                 f"with --embeddings-dir DIR")
        return self.checkpointer(), []
