"""Partitioning: the partitioner protocol, the partition book, the on-disk
format and its writers and reader.

Public names::

    partition(data, num_parts, root, partitioner="metis", **options)
    partition_files(source, num_parts, root, partitioner="hash", memory_limit=None, ...)
    PartitionInput, Partitioner          what a partitioner plugin sees / provides
    EdgeStream, StreamingPartitioner     the same, for graphs read from files in chunks
    PartitionBook                        global node id -> part, vectorised
    HeteroPartitionBook                  (node type, id) -> part, one book per type
    PartitionReader, PartData            reading a dataset back
    NodePart, EdgePart                   one part's node type / edge type (load_nodes, load_edges)
    splitmix64                           the ids' hash of the hash partitioner (numpy)

Names are imported on first use (PEP 562): partitioning from files
(:mod:`~pyg_dist.partitioning.out_of_core`) runs without importing torch,
which alone costs a few hundred MB of RSS under a memory limit.
"""

from __future__ import annotations

from pyg_dist.lazy_exports import lazy_exports

_EXPORTS = {
    "FORMAT_VERSION": "pyg_dist.partitioning.file_names",
    "HETERO_FORMAT_VERSION": "pyg_dist.partitioning.file_names",
    "EdgePart": "pyg_dist.partitioning.parts",
    "EdgeStream": "pyg_dist.partitioning.file_source",
    "HeteroPartitionBook": "pyg_dist.partitioning.hetero_book",
    "NodePart": "pyg_dist.partitioning.parts",
    "PartData": "pyg_dist.partitioning.parts",
    "PartitionBook": "pyg_dist.partitioning.book",
    "PartitionInput": "pyg_dist.partitioning.graph",
    "PartitionReader": "pyg_dist.partitioning.reader",
    "Partitioner": "pyg_dist.partitioning.graph",
    "StreamingPartitioner": "pyg_dist.partitioning.file_source",
    "partition": "pyg_dist.partitioning.writer",
    "partition_files": "pyg_dist.partitioning.out_of_core",
    "splitmix64": "pyg_dist.partitioning.splitmix",
    "symmetric_csr": "pyg_dist.partitioning.graph",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
