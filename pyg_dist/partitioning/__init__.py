"""Partitioning: the partitioner protocol, the partition book, the on-disk
format and its writer and reader.

Public names::

    partition(data, num_parts, root, partitioner="metis", **options)
    PartitionInput, Partitioner          what a partitioner plugin sees / provides
    PartitionBook                        global node id -> part, vectorised
    HeteroPartitionBook                  (node type, id) -> part, one book per type
    PartitionReader, PartData            reading a dataset back
    PartLoader, NodePart, EdgePart       one part, type by type
"""

from pyg_dist.partitioning.book import PartitionBook
from pyg_dist.partitioning.format import FORMAT_VERSION, HETERO_FORMAT_VERSION
from pyg_dist.partitioning.graph import Partitioner, PartitionInput, symmetric_csr
from pyg_dist.partitioning.hetero_book import HeteroPartitionBook
from pyg_dist.partitioning.parts import EdgePart, NodePart, PartData, PartLoader
from pyg_dist.partitioning.reader import PartitionReader
from pyg_dist.partitioning.writer import partition

__all__ = [
    "FORMAT_VERSION",
    "HETERO_FORMAT_VERSION",
    "EdgePart",
    "HeteroPartitionBook",
    "NodePart",
    "PartData",
    "PartLoader",
    "PartitionBook",
    "PartitionInput",
    "PartitionReader",
    "Partitioner",
    "partition",
    "symmetric_csr",
]
