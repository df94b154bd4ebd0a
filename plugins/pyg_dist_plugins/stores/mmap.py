"""The ``mmap`` stores: a part's tensors memory-mapped from its safetensors files.

Pages load on first touch and stay shared with the page cache, so a server
over a part larger than it wants to copy starts at once, and several servers
on one host share the same pages. The mapping is private (copy-on-write):
writes through the store never reach the files.

Trust boundary: the files are checked when the part is opened (sha256 against
``meta.json``, ids on load), but a mapping serves whatever the file holds
later: a row edited in place after that is served unchecked, and a file
truncated under the server kills it with SIGBUS (no Python code can catch a
fault in a mapped page). So the stores refuse to map a part whose files, or
the directories holding them, group or others may write: only the server's
own user (and root) can change them, who can change the server itself. Where
the files may change while served, use the ``memory`` stores (a copy, read
once).
"""

from __future__ import annotations

import os
import stat
from typing import Any

from pyg_dist.errors import PartitionFormatError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.store.local import PartitionFeatureStore, PartitionGraphStore
from pyg_dist_plugins.stores import check_no_options


def mmap_feature_store(reader: PartitionReader, part: int,
                       **options: Any) -> PartitionFeatureStore:
    """A feature store over part ``part``, its features memory-mapped.

    Args:
        reader: The dataset.
        part: The part to serve.
        **options: None are accepted.
    """
    check_no_options("mmap feature", options)
    check_only_owner_writes(reader, part)
    store = PartitionFeatureStore.from_part(reader.load_part(part, mmap=True, topology=False))
    store.reads_may_block = True  # a row not in the page cache is a disk read
    return store


def mmap_graph_store(reader: PartitionReader, part: int,
                     **options: Any) -> PartitionGraphStore:
    """A graph store over part ``part``, its topology memory-mapped.

    Args:
        reader: The dataset.
        part: The part to serve.
        **options: None are accepted.
    """
    check_no_options("mmap graph", options)
    check_only_owner_writes(reader, part)
    data = reader.load_part(part, mmap=True, features=False)
    sizes = {t: reader.num_nodes_of(t) for t in reader.node_types}
    store = PartitionGraphStore.from_part(data, sizes)
    store.reads_may_block = True
    return store


def check_only_owner_writes(reader: PartitionReader, part: int) -> None:
    """Refuses to map part ``part`` when group or others may write one of its
    files or a directory above them up to the dataset root (see the module
    doc: what is mapped is served as it is on disk).

    Raises:
        PartitionFormatError: naming the path and the fix.
    """
    entry = reader.meta["parts"][part]
    files = [reader.path(item["file"]).resolve()
             for item in entry["node_types"] + entry["edge_types"]]
    root = reader.root.resolve()
    paths = set(files)
    for path in files:
        for parent in path.parents:  # up to the dataset root
            paths.add(parent)
            if parent == root or parent == parent.parent:
                break
    for path in sorted(paths):
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise PartitionFormatError(f"cannot check {path}: {exc}") from exc
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not (stat.S_ISDIR(mode)
                                                        and mode & stat.S_ISVTX):
            raise PartitionFormatError(
                f"{path} may be written by group or others (mode {stat.filemode(mode)}): the "
                f"mmap stores serve a file as it is on disk, so an edit after the checksum "
                f"check would be served and a truncation would kill the server; run "
                f"'chmod go-w' on it, or serve with --feature-store memory --graph-store "
                f"memory")
