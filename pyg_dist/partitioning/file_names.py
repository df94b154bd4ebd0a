"""The dataset directory's names that need no torch: format name and
versions, file and reserved tensor names, type names and the file names
they make, part directories and checksums.

:mod:`~pyg_dist.partitioning.format` re-exports those its readers import
from it; the out-of-core writer (:mod:`~pyg_dist.partitioning.out_of_core`)
imports them from here so that partitioning from files runs without
importing torch, whose import alone costs a few hundred MB of RSS under a
memory limit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

FORMAT_NAME = "pyg-dist-partition"
FORMAT_VERSION = 1
"""Version of a homogeneous dataset (unchanged since the first release)."""
HETERO_FORMAT_VERSION = 2
"""Version of a heterogeneous dataset: per-type books, node and edge files."""
FORMAT_VERSIONS = (FORMAT_VERSION, HETERO_FORMAT_VERSION)
META_FILE = "meta.json"

# Reserved tensor names inside the node / edge files.
NODE_IDS = "node_ids"
INDPTR = "indptr"
INDICES = "indices"
EDGE_IDS = "edge_ids"
BOOK_KEY = "node_part"
RESERVED_NODE_NAMES = frozenset({NODE_IDS})
RESERVED_EDGE_NAMES = frozenset({INDPTR, INDICES, EDGE_IDS})
MAX_TYPE_NAME_BYTES = 64
"""Longest node type or relation name (UTF-8 bytes): three of them and the
prefixes make an edge file name, which must stay under 255 bytes."""


def edge_ends(edge_type: Optional[tuple[str, str, str]]
              ) -> tuple[Optional[str], Optional[str]]:
    """An edge type's source and destination node types (``None`` both for
    a homogeneous graph's edge type ``None``)."""
    return (None, None) if edge_type is None else (edge_type[0], edge_type[-1])


def feature_specs(arrays: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``meta.json``'s record of feature arrays (anything with a numpy
    ``dtype`` and a ``shape``): per name its dtype's name (``float32``) and
    its shape without the row dimension. bfloat16 rows travel as a one-field
    numpy record named ``bfloat16``
    (:data:`~pyg_dist.partitioning.safetensors_stream.BFLOAT16`): the field
    names the dtype."""
    return {name: {"dtype": (a.dtype.names or [str(a.dtype)])[0], "shape": list(a.shape[1:])}
            for name, a in arrays.items()}


def part_dir(part: int) -> str:
    """The directory of part ``part`` relative to ROOT."""
    return f"part-{part}"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """The hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def recorder(root: Path, files: dict[str, dict[str, Any]]) -> Callable[[str], str]:
    """A function that checksums a written file (its name relative to
    ``root``) into ``files``, ``meta.json``'s record, and returns its name."""
    def record(name: str) -> str:
        path = root / name
        files[name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        return name
    return record


def type_name_problem(name: Any) -> Optional[str]:
    """What makes ``name`` unusable as a node type or relation name, or ``None``.

    Type names become parts of file names, so a name must be a non-empty
    string of at most :data:`MAX_TYPE_NAME_BYTES` UTF-8 bytes without path
    separators, NULs or control characters, other than ``.`` and without
    ``..``; and so that ``src__rel__dst`` names one edge type only, it must
    not contain ``__`` nor start or end with ``_``.
    """
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    if not name:
        return "is empty"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_TYPE_NAME_BYTES:
        return f"is longer than {MAX_TYPE_NAME_BYTES} bytes"
    if any(c in "/\\" or ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "holds a path separator or a control character"
    if name == "." or ".." in name:
        return "is '.' or holds '..'"
    if "__" in name or name.startswith("_") or name.endswith("_"):
        return "holds '__' or starts or ends with '_' (reserved to join type names)"
    return None


def type_slug(type_: Union[None, str, tuple[str, str, str]]) -> str:
    """A file-name fragment for a node or edge type ('' for homogeneous):
    ``__paper``, ``__author__writes__paper``. Names must pass
    :func:`type_name_problem`, which makes the fragment name one type only."""
    if type_ is None:
        return ""
    parts = [type_] if isinstance(type_, str) else list(type_)
    for part in parts:
        problem = type_name_problem(part)
        if problem is not None:
            raise ValueError(f"type name {part!r} {problem}")
    return "__" + "__".join(parts)


def book_file(node_type: Optional[str]) -> str:
    """The book file of a node type (``book.safetensors`` when homogeneous)."""
    return f"book{type_slug(node_type)}.safetensors"


def node_file(part: int, node_type: Optional[str]) -> str:
    """A part's node file of a node type, relative to ROOT."""
    return f"{part_dir(part)}/nodes{type_slug(node_type)}.safetensors"


def edge_file(part: int, edge_type: Optional[tuple[str, str, str]]) -> str:
    """A part's edge file of an edge type, relative to ROOT."""
    return f"{part_dir(part)}/edges{type_slug(edge_type)}.safetensors"
