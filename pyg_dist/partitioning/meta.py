"""Reading ``meta.json`` before anything trusts it.

``meta.json`` steers the reader (file names, counts) and the server (feature
shapes and dtypes bound the size of every reply), so a crafted or damaged one
is refused whole when the dataset is opened, with a
:class:`~pyg_dist.errors.PartitionFormatError` naming the field:

* the file: a regular file (not a symbolic link) of at most
  :data:`MAX_META_BYTES`; JSON without ``NaN``/``Infinity`` or repeated keys,
  nesting at most :data:`MAX_DEPTH` levels (here);
* every field against the version-1 schema (:mod:`~pyg_dist.partitioning.meta_schema`);
* the files it names against it (:mod:`~pyg_dist.partitioning.consistency`).

Error messages never echo values from the file beyond short, already checked
names and bounded integers: a value is named by its type
(:func:`~pyg_dist.partitioning.meta_schema.describe`).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from pyg_dist.errors import PartitionFormatError
from pyg_dist.partitioning.format import META_FILE
from pyg_dist.partitioning.meta_schema import json_depth, validate_meta

MAX_META_BYTES = 64 << 20
"""Largest ``meta.json`` read (32,768 parts take about 20 MB)."""
MAX_DEPTH = 16
"""Deepest nesting of JSON arrays and objects in ``meta.json``."""

_FIX = "the dataset is damaged or was edited: partition it again"


def read_meta(root: Path) -> dict[str, Any]:
    """Reads and validates ``root/meta.json``.

    Returns:
        The validated metadata.

    Raises:
        PartitionFormatError: if the file is missing, a symbolic link, too big,
            not JSON, nested too deep, or breaks the schema (the message names
            the field and says what to do).
    """
    path = root / META_FILE
    try:
        # O_NONBLOCK: a FIFO put there opens at once (and is refused below)
        # instead of blocking until somebody writes into it.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise PartitionFormatError(
            f"{root} holds no {META_FILE}; is it a dataset written by "
            f"'pyg-dist partition'?") from exc
    except OSError as exc:
        reason = "it is a symbolic link, which is refused: copy the real file there" \
            if os.path.islink(path) else exc.strerror
        raise PartitionFormatError(f"cannot read {path}: {reason}") from exc
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise PartitionFormatError(f"{path} is not a regular file")
        if info.st_size > MAX_META_BYTES:
            raise PartitionFormatError(f"{path} has {info.st_size} bytes, more than the "
                                       f"{MAX_META_BYTES} a meta.json may have; {_FIX}")
        raw = f.read(MAX_META_BYTES + 1)
    meta = parse_json(raw, path, MAX_DEPTH)
    validate_meta(meta, root, path)
    return meta


def parse_json(raw: bytes, path: Path, max_depth: int) -> Any:
    """Parses JSON text from a file, refusing ``NaN``, repeated keys and
    nesting deeper than ``max_depth``.

    Raises:
        PartitionFormatError: naming ``path``.
    """
    if len(raw) > MAX_META_BYTES:
        raise PartitionFormatError(f"{path} grew past {MAX_META_BYTES} bytes while read")
    deep = PartitionFormatError(f"{path} nests JSON deeper than {max_depth} levels; {_FIX}")
    try:
        value = json.loads(raw, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except RecursionError as exc:
        raise deep from exc
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
        raise PartitionFormatError(f"{path} is not valid JSON ({str(exc)[:200]}); "
                                   f"{_FIX}") from exc
    if json_depth(value) > max_depth:
        raise deep
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("an object repeats a key")
    return out
