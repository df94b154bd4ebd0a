"""``DistEmbedding``: a learnable embedding table whose rows live on the
partition servers that own the nodes.

Each server holds the rows of its own nodes (``emb_create``, sharded by the
partition book like every feature) and applies the optimiser's steps to them
(``emb_push``, :mod:`pyg_dist.optim`). ``emb(ids)`` fetches the rows of the
ids (one ``emb_read`` per owning server, all at once) as a leaf tensor that
records its gradient; :meth:`DistEmbedding.gradient` sums the gradients of
every call since :meth:`DistEmbedding.zero_grad` into one row per id, which
the optimiser sends to the owners, one push per server per step. Like DGL's
``DistEmbedding``, it is not an ``nn.Module``: its rows are no parameter
that DDP would all-reduce; each trainer's updates go to the servers, which
apply all of them (asynchronously per row: docs/embeddings.md).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor

from pyg_dist.errors import EmbeddingError
from pyg_dist.kernels.distinct import all_distinct
from pyg_dist.partitioning.format import load_tensors, save_tensors, sha256_file
from pyg_dist.protocol.ops import EMB_CREATE, EMB_PUSH, EMB_READ, EMB_WRITE, TABLE_DTYPES
from pyg_dist.routing.row_fetch import RowRequest, fetch_rows, row_request
from pyg_dist.store.remote_feature_store import FeatureInfo

logger = logging.getLogger(__name__)

Init = Union[str, Callable[[Tensor], Tensor]]
_DTYPES = {getattr(torch, name): name for name in TABLE_DTYPES}  # the wire's names
_CHUNK_BYTES = 32 << 20  # rows per request: at most this many bytes
# Rows read with autograd but not yet in a backward (a loader's prefetched
# batches) survive this many zero_grad calls, then are forgotten (a batch
# never trained on must not be held for ever).
_UNUSED_ZERO_GRADS = 8


@dataclass
class PendingRead:
    """Rows of a table on their way (:meth:`DistEmbedding.start_read`).

    Args:
        ids: The distinct ids asked for.
        inverse: Where each id the caller asked for lies in ``ids``
            (``None``: the caller's ids were ``ids``).
        request: What :func:`~pyg_dist.routing.row_fetch.fetch_rows` sends;
            its one output receives the rows.
    """

    ids: Tensor
    inverse: Optional[Tensor]
    request: RowRequest


def remote_store(stores: Any) -> Any:
    """The remote feature store of ``(fs, gs)`` of :func:`pyg_dist.connect`,
    of that feature store alone, or of a ``CachedFeatureStore`` in front."""
    fs = stores[0] if isinstance(stores, (tuple, list)) else stores
    return getattr(fs, "remote", fs)  # a CachedFeatureStore wraps the remote store


def router_of(stores: Any) -> Any:
    """The :class:`~pyg_dist.routing.id_router.Router` behind ``stores`` (see
    :func:`remote_store`)."""
    fs = remote_store(stores)
    router = getattr(fs, "router", None)
    if router is None:
        raise EmbeddingError(f"DistEmbedding needs the (feature_store, graph_store) pair of "
                             f"pyg_dist.connect(), got {type(fs).__name__}")
    return router


class DistEmbedding:
    """A learnable embedding per node of one node type, served by the
    partition servers.

    Example::

        fs, gs = pyg_dist.connect()
        emb = pyg_dist.DistEmbedding((fs, gs), "user", 64, init="uniform",
                                     node_type="user")
        opt = pyg_dist.optim.SparseAdam([emb], lr=0.01)
        x = emb(batch["user"].n_id)          # rows with autograd
        loss(model(x, ...)).backward()
        opt.step(); opt.zero_grad()

    Args:
        stores: ``(feature_store, graph_store)`` of :func:`pyg_dist.connect`
            (or the feature store alone, or a ``CachedFeatureStore``).
        name: The table's name on the servers (letters, digits, ``_.-``);
            every trainer that names it shares one table.
        dim: Values per row.
        init: ``"zeros"``, ``"uniform"`` (``U(-1/sqrt(dim), 1/sqrt(dim))``,
            drawn on each server from ``seed`` and its part), or a callable
            ``init(ids) -> [len(ids), dim]`` of global ids, run on the trainer
            that creates the table (the first to ask each server).
        node_type: The nodes' type on a heterogeneous graph (``None`` on a
            homogeneous one).
        dtype: ``torch.float32`` or ``torch.bfloat16`` (how rows are held and
            sent; optimiser arithmetic is float32).
        seed: Seeds ``"uniform"``.
        timeout: Deadline of each call; the connection's by default.
        attr_name: Also serve the rows as this node attribute of the feature
            store (of ``node_type``): the loaders' batches then carry them
            (``batch.<attr_name>``, ``batch[node_type].<attr_name>``) with
            autograd back to the table, as the remote feature store reads
            them for the batch's nodes. ``None``: call ``emb(ids)`` yourself.
        staleness: Steps of this trainer a read may miss: ``0`` (default)
            waits for every push sent before it (one trainer's steps equal
            torch's); ``k`` lets a read go out while the pushes of the last
            ``k`` steps are still on their way, overlapping them with the
            next batch (rows up to ``k`` of its own steps old, as under
            several trainers).

    Raises:
        EmbeddingError: on a bad argument, replicas of a part (refused: one
            copy of each row is updated), or a table of that name with
            another shape on the servers.
    """

    def __init__(self, stores: Any, name: str, dim: int, init: Init = "uniform",
                 node_type: Optional[str] = None, dtype: torch.dtype = torch.float32, *,
                 seed: int = 0, timeout: Optional[float] = None,
                 attr_name: Optional[str] = None, staleness: int = 0) -> None:
        self.router = router_of(stores)
        self._store = remote_store(stores)
        if self.router.replicas and any(len(g) > 1 for g in self.router.replicas):
            raise EmbeddingError("DistEmbedding refuses replicated parts: each row must "
                                 "have one copy that every update reaches; connect to one "
                                 "server per part")
        if dtype not in _DTYPES:
            raise EmbeddingError(f"dtype must be one of {[f'torch.{n}' for n in TABLE_DTYPES]}, "
                                 f"got {dtype}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise EmbeddingError(f"dim must be a positive int, got {dim!r}")
        if not callable(init) and init not in ("zeros", "uniform"):
            raise EmbeddingError(f"init must be 'zeros', 'uniform' or a callable of global "
                                 f"ids, got {init!r}")
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise EmbeddingError(f"staleness must be an int >= 0, got {staleness!r}")
        self.staleness = staleness
        self.name, self.embedding_dim, self.dtype = name, dim, dtype
        self.node_type = node_type
        self.num_embeddings = self.router.num_nodes_of(node_type)
        self.timeout = timeout
        self._trace: list[list[Any]] = []  # [ids, rows, zero_grads seen unused]
        # A loader's threads read (with autograd) while the training thread
        # steps: the trace and the pending pushes are shared.
        self._trace_lock = threading.Lock()
        self._pending: list[tuple[int, int, futures.Future]] = []  # (push, part, future)
        self._pushes = 0
        self._pid = os.getpid()  # reads with autograd belong to this process
        self._create(init, seed)
        if attr_name is not None:
            self._store.add_embedding(node_type, attr_name, self)

    def __getstate__(self) -> Any:
        # A copy in another process (a DataLoader worker) would record
        # gradients its trainer never sees: refuse, saying what to do.
        raise EmbeddingError(f"DistEmbedding {self.name!r} cannot be copied to another "
                             f"process (a DataLoader worker builds batches whose gradients "
                             f"would never reach the optimiser); build batches in the "
                             f"training process (num_workers=0; prefetch=K uses threads)")

    def __repr__(self) -> str:
        return (f"DistEmbedding({self.name!r}, {self.num_embeddings}, "
                f"{self.embedding_dim}, node_type={self.node_type!r}, dtype={self.dtype})")

    @property
    def rows_per_request(self) -> int:
        return max(1, _CHUNK_BYTES // (self.embedding_dim * 4))

    def _parts(self) -> range:
        return range(self.router.num_parts)

    # Creation ##############################################################

    def _create(self, init: Init, seed: int) -> None:
        args = {"name": self.name, "dim": self.embedding_dim, "dtype": _DTYPES[self.dtype],
                "init": "given" if callable(init) else init, "group": self.node_type}
        if init == "uniform":
            args["seed"] = int(seed)
        replies = self.router.call_all([EMB_CREATE.request(p, args) for p in self._parts()],
                                       self.timeout)
        waiting = []
        for part, reply in zip(self._parts(), replies):
            if reply.result["created"] and callable(init):
                self._initialise(part, init)
            elif not reply.result["ready"]:
                waiting.append(part)
        deadline = time.monotonic() + self.router.deadline(self.timeout)
        while waiting:  # another trainer is writing the first rows of these parts
            if time.monotonic() > deadline:
                raise EmbeddingError(f"embedding table {self.name!r} was still being "
                                     f"initialised on parts {waiting} by another trainer "
                                     f"after the deadline")
            time.sleep(0.05)
            replies = self.router.call_all([EMB_CREATE.request(p, args) for p in waiting],
                                           self.timeout)
            waiting = [p for p, r in zip(waiting, replies) if not r.result["ready"]]

    def _owned(self, part: int) -> Tensor:
        return self.router.book_of(self.node_type).owned(part)

    def _initialise(self, part: int, init: Callable[[Tensor], Tensor]) -> None:
        """Writes ``init``'s rows of the nodes of ``part``, then opens the table."""
        owned = self._owned(part)
        chunks = list(owned.split(self.rows_per_request)) or [owned]
        for i, ids in enumerate(chunks):
            rows = init(ids)
            if not isinstance(rows, Tensor) or list(rows.shape) != [ids.numel(),
                                                                     self.embedding_dim]:
                raise EmbeddingError(f"init of {self.name!r} must return a tensor of shape "
                                     f"[{ids.numel()}, {self.embedding_dim}] for "
                                     f"{ids.numel()} ids, got {getattr(rows, 'shape', rows)}")
            self._write(part, ids, rows, ready=i == len(chunks) - 1)

    def _write(self, part: int, ids: Tensor, rows: Tensor, ready: bool = False) -> None:
        rows = rows.detach().to(self.dtype).contiguous()
        self.router.call_all([EMB_WRITE.request(part, {"name": self.name, "ready": ready},
                                                [ids, rows])], self.timeout)

    # Reading and autograd ##################################################

    def __call__(self, ids: Tensor, distinct: bool = False) -> Tensor:
        """The rows of ``ids`` (global ids of the node type, any order,
        repeats allowed), ``[len(ids), dim]``; with autograd on, their
        gradient is recorded for the optimiser's next step.

        Args:
            ids: The global ids.
            distinct: The caller vouches that no id repeats, which spares
                the check; a push with a repeated id would be refused whole.
        """
        ids = self.router.check_ids(torch.as_tensor(ids), "embedding ids", self.node_type)
        read = self.start_read(ids, pool=self._pool(), distinct=distinct)
        fetch_rows(self.router, [read.request], self.timeout)
        return self.finish_read(read)

    def read(self, ids: Tensor) -> Tensor:
        """The rows of ``ids`` as they are on the servers (this trainer's
        steps applied, but for the last ``staleness``), without autograd."""
        ids = self.router.check_ids(torch.as_tensor(ids), "embedding ids", self.node_type)
        read = self.start_read(ids, pool=self._pool(), distinct=True)
        fetch_rows(self.router, [read.request], self.timeout)
        return read.request.outs[0]

    def start_read(self, ids: Tensor, *, pin: bool = False, pool: Any = None,
                   distinct: bool = False) -> PendingRead:
        """The request for the rows of ``ids`` (checked global ids), for
        :func:`~pyg_dist.routing.row_fetch.fetch_rows` to send with a batch's
        other rows (one round trip; a server on this host writes its rows
        into the output itself); :meth:`finish_read` then gives the rows.
        Waits first for this trainer's pushes but the last ``staleness``
        steps'.

        Args:
            ids: The ids (repeats allowed unless ``distinct``).
            pin: The rows go to a CUDA device (page-locked output).
            pool: The remote feature store's output pool
                (:meth:`~pyg_dist.store.remote_feature_store.RemoteFeatureStore.output_pool`).
            distinct: The caller vouches that no id repeats.
        """
        if os.getpid() != self._pid and torch.is_grad_enabled():
            raise EmbeddingError(f"DistEmbedding {self.name!r} was read with autograd in a "
                                 f"forked process (a DataLoader worker): its gradient would "
                                 f"never reach the optimiser; build batches in the training "
                                 f"process (num_workers=0; prefetch=K uses threads)")
        self.flush(self.staleness)
        inverse = None
        # Distinct ids (a batch's n_id): the rows read are the leaf, in the
        # caller's order, with no gather (nor its backward).
        if not distinct and not all_distinct(ids, self.num_embeddings):
            ids, inverse = torch.unique(ids, return_inverse=True)
        shares = self.router.split(ids, self.node_type) if ids.numel() else []
        args = {"name": self.name, "dtype": _DTYPES[self.dtype], "dim": self.embedding_dim}
        limits = [self.rows_per_request * self.embedding_dim * 4] * self.router.num_parts
        request = row_request(EMB_READ.name, args, [self.name],
                              [FeatureInfo(self.dtype, (self.embedding_dim,))], ids.numel(),
                              shares, limits, pin, pool)
        return PendingRead(ids, inverse, request)

    def finish_read(self, read: PendingRead) -> Tensor:
        """The rows of a :meth:`start_read` that was fetched, in the order of
        the ids asked for; with autograd on, a leaf whose gradient the next
        step pushes."""
        rows = read.request.outs[0]
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            with self._trace_lock:
                self._trace.append([read.ids, rows, 0])
        return rows if read.inverse is None else rows.index_select(0, read.inverse)

    def _pool(self) -> Any:
        """The output pool same-host servers write rows into, if any."""
        output_pool = getattr(self._store, "output_pool", None)
        return output_pool() if output_pool is not None else None

    def gradient(self) -> Optional[tuple[Tensor, Tensor]]:
        """The gradient since :meth:`zero_grad`: ``(ids, grads)``, one row
        (float32) per distinct id; ``None`` if none."""
        with self._trace_lock:
            pairs = [(ids, rows.grad) for ids, rows, _ in self._trace if rows.grad is not None]
        if not pairs:
            return None
        if len(pairs) == 1:  # a leaf's ids are distinct: no copy, no sum
            return pairs[0][0], pairs[0][1].to(torch.float32)
        ids = torch.cat([p[0] for p in pairs])
        grads = torch.cat([p[1] for p in pairs]).to(torch.float32)
        unique, inverse = torch.unique(ids, return_inverse=True)
        summed = torch.zeros(unique.numel(), self.embedding_dim, dtype=torch.float32)
        return unique, summed.index_add_(0, inverse, grads)

    @property
    def grad(self) -> Optional[Tensor]:
        """The gradient as a coalesced sparse ``[num_embeddings, dim]``
        tensor, like ``nn.Embedding(sparse=True).weight.grad``."""
        gradient = self.gradient()
        if gradient is None:
            return None
        ids, grads = gradient
        order = ids.argsort()
        return torch.sparse_coo_tensor(ids[order].view(1, -1), grads[order],
                                       (self.num_embeddings, self.embedding_dim),
                                       is_coalesced=True, check_invariants=False)

    def zero_grad(self) -> None:
        """Forgets the gradients recorded so far. Rows read with autograd
        that no backward reached yet (a batch prefetched before this step)
        are kept for the next step's gradient."""
        with self._trace_lock:
            kept = []
            for entry in self._trace:
                if entry[1].grad is None and entry[2] < _UNUSED_ZERO_GRADS:
                    entry[2] += 1
                    kept.append(entry)
            self._trace = kept

    # Pushes (pyg_dist.optim) ###############################################

    def push(self, optimizer: dict[str, Any], ids: Tensor, grads: Tensor) -> None:
        """Sends one optimiser step of ``(ids, grads)`` (ids unique) to the
        owning servers, one request each, without waiting: the next read
        (or :meth:`flush`) waits for them and raises their errors."""
        self.flush(self.staleness)
        client, deadline = self.router.client, self.router.deadline(self.timeout)
        self._pushes += 1
        for part, positions, owned in self.router.split(ids, self.node_type):
            request = EMB_PUSH.request(part, {"name": self.name, "optimizer": optimizer},
                                       [owned, grads.index_select(0, positions)])
            future = client.call_async(*request, timeout=deadline)
            with self._trace_lock:
                self._pending.append((self._pushes, part, future))

    def flush(self, keep: int = 0) -> None:
        """Waits until every step sent was applied (but those of the last
        ``keep`` steps); raises the first error (a typed ``RpcError``: a
        server lost mid-step loses that step)."""
        with self._trace_lock:  # a loader's thread may read (and flush) meanwhile
            newest = self._pushes - keep
            pending = [p for p in self._pending if p[0] <= newest]
        if not pending:
            return
        # The futures stay listed until they are done, so that a second
        # thread flushing meanwhile (the loader's other prefetch thread)
        # waits for them too instead of reading rows they have not reached.
        client, deadline = self.router.client, self.router.deadline(self.timeout)
        failure: Optional[BaseException] = None
        for _, part, future in pending:
            try:
                client.result(future, part, EMB_PUSH.name, deadline)
            except Exception as exc:  # wait for every part: the others' steps count
                failure = failure or exc
        with self._trace_lock:
            done = {id(p[2]) for p in pending}
            self._pending = [p for p in self._pending if id(p[2]) not in done]
        if failure is not None:
            raise failure

    # Persistence ###########################################################

    def save(self, directory: Union[str, os.PathLike]) -> Path:
        """Writes every row (global order) to ``DIR/<name>.safetensors`` with
        ``DIR/<name>.json`` (its sha256, dim, dtype, node type); returns the
        file. Optimiser state is the servers' (their checkpoints)."""
        self.flush()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        weight = self.read(torch.arange(self.num_embeddings))
        path = directory / f"{self.name}.safetensors"
        tmp = path.with_name(path.name + ".tmp")
        save_tensors(tmp, {"weight": weight})
        os.replace(tmp, path)
        info = {"name": self.name, "dim": self.embedding_dim, "dtype": _DTYPES[self.dtype],
                "node_type": self.node_type, "num_embeddings": self.num_embeddings,
                "sha256": sha256_file(path)}
        meta = directory / f"{self.name}.json"
        meta.with_name(meta.name + ".tmp").write_text(json.dumps(info, indent=1))
        os.replace(meta.with_name(meta.name + ".tmp"), meta)
        return path

    def load(self, directory: Union[str, os.PathLike], name: Optional[str] = None) -> None:
        """Sets every row from :meth:`save`'s files in ``directory`` (those of
        the table ``name``, by default this one's).

        Raises:
            EmbeddingError: if the files are missing, their sha256 differs,
                or they hold another shape.
        """
        self.flush()
        directory, name = Path(directory), name or self.name
        path = directory / f"{name}.safetensors"
        try:
            info = json.loads((directory / f"{name}.json").read_text())
            ok = isinstance(info, dict) and info.get("sha256") == sha256_file(path)
            weight = load_tensors(path, ["weight"])["weight"] if ok else None
        except Exception as exc:
            raise EmbeddingError(f"cannot load embedding {self.name!r} from {directory}: "
                                 f"{exc}") from exc
        if weight is None or list(weight.shape) != [self.num_embeddings, self.embedding_dim]:
            raise EmbeddingError(f"{path} does not verify against its .json or does not hold "
                                 f"[{self.num_embeddings}, {self.embedding_dim}] rows")
        for part in self._parts():
            owned = self._owned(part)
            for ids in owned.split(self.rows_per_request):
                self._write(part, ids, weight.index_select(0, ids))

    def parameters(self) -> Sequence[DistEmbedding]:
        """``[self]``, so that ``optim.SparseAdam(emb.parameters(), ...)``
        reads like torch."""
        return [self]
