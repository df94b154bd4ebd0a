"""The dataset directory's names that need no torch: format name and
versions, file and reserved tensor names, part directories and checksums.

:mod:`~pyg_dist.partitioning.format` re-exports all of them; the out-of-core
writer (:mod:`~pyg_dist.partitioning.out_of_core`) imports them from here so
that partitioning from files runs without importing torch, whose import alone
costs a few hundred MB of RSS under a memory limit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

FORMAT_NAME = "pyg-dist-partition"
FORMAT_VERSION = 1
"""Version of a homogeneous dataset (unchanged since the first release)."""
HETERO_FORMAT_VERSION = 2
"""Version of a heterogeneous dataset: per-type books, node and edge files."""
FORMAT_VERSIONS = (FORMAT_VERSION, HETERO_FORMAT_VERSION)
META_FILE = "meta.json"
BOOK_FILE = "book.safetensors"

# Reserved tensor names inside the node / edge files.
NODE_IDS = "node_ids"
INDPTR = "indptr"
INDICES = "indices"
EDGE_IDS = "edge_ids"
BOOK_KEY = "node_part"
RESERVED_NODE_NAMES = frozenset({NODE_IDS})
RESERVED_EDGE_NAMES = frozenset({INDPTR, INDICES, EDGE_IDS})


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
