"""A partition server's embedding tables on disk: written periodically and
on a clean stop, read back when the server starts.

The directory of one part (``DIR/part-K/``) holds, in the partition's own
format, one safetensors file per table (``weight``, the part's global
``node_ids`` of the rows, and ``state.<kind>.<key>`` of its optimiser) and
``embeddings.json``, which names each table's file, its sha256, node type,
dimension, dtype and update count. A checkpoint is atomic: every table file
is written under a new name and synced, then ``embeddings.json`` replaces
the old one in one rename (so a reader sees the old checkpoint or the new
one, never a mix), then the files the old one named are removed. A server
killed between two checkpoints comes back with the last one: the updates
since are lost, and a table's ``updates`` count tells how many it kept.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Optional, Union

import torch

from pyg_dist.errors import EmbeddingError, PartitionFormatError
from pyg_dist.partitioning.format import load_tensors, save_tensors, sha256_file
from pyg_dist.server.embedding_updates import STATE_KEYS
from pyg_dist.server.embeddings import TABLE_DTYPES, EmbeddingOps, EmbeddingTable, table_name

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
INDEX = "embeddings.json"
_MAX_INDEX_BYTES = 1 << 20


def _sync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EmbeddingCheckpoint:
    """Checkpoints the tables of ``ops`` under ``directory/part-K``.

    Args:
        ops: The part's tables.
        directory: The checkpoint root (shared by all parts).
        every: Seconds between checkpoints while tables change; ``None`` or
            ``0``: only on stop and when asked (``emb_checkpoint``).
    """

    def __init__(self, ops: EmbeddingOps, directory: Union[str, os.PathLike],
                 every: Optional[float] = 60.0) -> None:
        self.ops = ops
        self.path = Path(directory) / f"part-{ops.part}"
        if every is not None and not 0 <= every < float("inf"):
            raise EmbeddingError(f"checkpoint_every must be a number of seconds >= 0, got "
                                 f"{every!r}")
        self.every = float(every) if every else None
        self._saving = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # Writing ###############################################################

    def save(self) -> dict[str, Any]:
        """Writes every table now; returns ``{"tables", "path"}``."""
        with self._saving:
            self.ops.changed.clear()
            self.path.mkdir(parents=True, exist_ok=True)
            old = self._read_index() if (self.path / INDEX).exists() else {}
            entries = {}
            for table in list(self.ops.tables.values()):
                entries[table.name] = self._save_table(table)
            index = {"format_version": FORMAT_VERSION, "part": self.ops.part,
                     "tables": entries}
            _sync_write(self.path / INDEX, json.dumps(index, indent=1).encode())
            _sync_dir(self.path)
            kept = {e["file"] for e in entries.values()}
            for entry in old.get("tables", {}).values():
                if entry.get("file") not in kept:
                    (self.path / entry["file"]).unlink(missing_ok=True)
        logger.info("part %d: checkpointed %d embedding tables to %s", self.ops.part,
                    len(entries), self.path)
        return {"tables": len(entries), "path": str(self.path)}

    def _save_table(self, table: EmbeddingTable) -> dict[str, Any]:
        index = self.ops._index_of(table.group)
        with table.lock:  # a consistent copy: no push half applied
            tensors = {"weight": table.weight.clone(), "node_ids": index.node_ids.clone()}
            for kind, state in table.state.items():
                tensors.update({f"state.{kind}.{k}": v.clone() for k, v in state.items()})
            updates = table.updates
        # A new name each time (the index names it), so the last
        # checkpoint's file is never overwritten in place.
        name = f"{table.name}.{time.time_ns()}.safetensors"
        tmp = self.path / (name + ".tmp")
        save_tensors(tmp, tensors)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.path / name)
        return {"group": table.group, "dim": table.dim, "dtype": table.dtype_name,
                "file": name, "sha256": sha256_file(self.path / name), "updates": updates,
                "state": sorted(table.state)}

    # Reading ###############################################################

    def _read_index(self) -> dict[str, Any]:
        path = self.path / INDEX
        try:
            if path.stat().st_size > _MAX_INDEX_BYTES:
                raise EmbeddingError(f"{path} is over {_MAX_INDEX_BYTES} bytes; not a "
                                     f"checkpoint index")
            index = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise EmbeddingError(f"cannot read the embedding checkpoint {path}: {exc}") \
                from exc
        if not isinstance(index, dict) or index.get("format_version") != FORMAT_VERSION \
                or index.get("part") != self.ops.part \
                or not isinstance(index.get("tables"), dict):
            raise EmbeddingError(f"{path} is not a format-{FORMAT_VERSION} embedding "
                                 f"checkpoint of part {self.ops.part}")
        return index

    def load(self) -> int:
        """Loads the tables of the last checkpoint, if there is one; returns
        how many.

        Raises:
            EmbeddingError: if the checkpoint is malformed, a file's sha256
                differs, or its rows are not this part's nodes.
        """
        if not (self.path / INDEX).exists():
            return 0
        index = self._read_index()
        for name, entry in index["tables"].items():
            table = self._load_table(name, entry)
            self.ops.tables[table.name] = table
        logger.info("part %d: loaded %d embedding tables from %s", self.ops.part,
                    len(index["tables"]), self.path)
        return len(index["tables"])

    def _load_table(self, name: Any, entry: Any) -> EmbeddingTable:
        name = table_name(name)
        bad = f"checkpoint {self.path / INDEX}, table {name!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str) \
                or "/" in entry["file"] or entry["file"].startswith(".") \
                or entry.get("dtype") not in TABLE_DTYPES:
            raise EmbeddingError(f"{bad}: malformed entry")
        path = self.path / entry["file"]
        if not path.is_file() or sha256_file(path) != entry.get("sha256"):
            raise EmbeddingError(f"{bad}: {path} is missing or its sha256 differs from the "
                                 f"index; restore the checkpoint or remove {self.path}")
        group = entry.get("group")
        try:
            tensors = load_tensors(path)
            node_ids = self.ops._index_of(group).node_ids
        except PartitionFormatError as exc:
            raise EmbeddingError(f"{bad}: {exc}") from exc
        weight = tensors.get("weight")
        if weight is None or weight.dim() != 2 or weight.dtype != TABLE_DTYPES[entry["dtype"]] \
                or not torch.equal(tensors.get("node_ids", torch.empty(0)), node_ids) \
                or weight.shape[0] != node_ids.numel():
            raise EmbeddingError(f"{bad}: its rows are not the nodes of part "
                                 f"{self.ops.part}; was it written for another partitioning?")
        state: dict[str, dict[str, Any]] = {}
        for kind in entry.get("state", []):
            keys = STATE_KEYS.get(kind)
            if keys is None or any(f"state.{kind}.{k}" not in tensors for k in keys):
                raise EmbeddingError(f"{bad}: optimiser state {kind!r} is incomplete")
            state[kind] = {k: tensors[f"state.{kind}.{k}"] for k in keys}
            if any(t.shape != weight.shape for t in state[kind].values()):
                raise EmbeddingError(f"{bad}: optimiser state {kind!r} has the wrong shape")
        return EmbeddingTable(name, group, weight, ready=True,
                              updates=int(entry.get("updates", 0)), state=state)

    # Periodic ##############################################################

    def start(self) -> None:
        """Starts the periodic checkpoints (if ``every`` is set)."""
        if self.every is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"emb-ckpt-{self.ops.part}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.ops.changed.is_set():
                try:
                    self.save()
                except Exception:  # keep serving; the next period tries again
                    logger.exception("part %d: embedding checkpoint failed", self.ops.part)

    def stop(self) -> None:
        """Stops the periodic checkpoints and writes a last one if a table
        changed since the previous one (a clean stop loses nothing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self.ops.tables and (self.ops.changed.is_set() or not (self.path / INDEX).exists()):
            self.save()
