"""Partitioning: the partitioner protocol, the partition book, the on-disk
format and its writer and reader.

Public names::

    partition(data, num_parts, root, partitioner="metis", **options)
    PartitionInput, Partitioner          what a partitioner plugin sees / provides
    PartitionBook                        global node id -> part, vectorised
    HeteroPartitionBook                  (node type, id) -> part, one book per type
    PartitionReader, PartData            reading a dataset back
    NodePart, EdgePart                   one part's node type / edge type (load_nodes, load_edges)
"""

from pyg_dist.partitioning.book import PartitionBook
from pyg_dist.partitioning.format import FORMAT_VERSION, HETERO_FORMAT_VERSION
from pyg_dist.partitioning.graph import Partitioner, PartitionInput, symmetric_csr
from pyg_dist.partitioning.hetero_book import HeteroPartitionBook
from pyg_dist.partitioning.parts import EdgePart, NodePart, PartData
from pyg_dist.partitioning.reader import PartitionReader
from pyg_dist.partitioning.writer import partition

__all__ = [
    "FORMAT_VERSION",
    "HETERO_FORMAT_VERSION",
    "EdgePart",
    "HeteroPartitionBook",
    "NodePart",
    "PartData",
    "PartitionBook",
    "PartitionInput",
    "PartitionReader",
    "Partitioner",
    "partition",
    "symmetric_csr",
]
