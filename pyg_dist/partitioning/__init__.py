"""Partitioning: the partitioner protocol, the partition book, the on-disk
format and its writer and reader.

Public names::

    partition(data, num_parts, root, partitioner="metis", **options)
    PartitionInput, Partitioner          what a partitioner plugin sees / provides
    PartitionBook                        global node id -> part, vectorised
    PartitionReader, PartData            reading a dataset back
"""

from pyg_dist.partitioning.book import PartitionBook
from pyg_dist.partitioning.format import FORMAT_VERSION
from pyg_dist.partitioning.graph import Partitioner, PartitionInput, symmetric_csr
from pyg_dist.partitioning.reader import EdgePart, NodePart, PartData, PartitionReader
from pyg_dist.partitioning.writer import partition

__all__ = [
    "FORMAT_VERSION",
    "EdgePart",
    "NodePart",
    "PartData",
    "PartitionBook",
    "PartitionInput",
    "PartitionReader",
    "Partitioner",
    "partition",
    "symmetric_csr",
]
