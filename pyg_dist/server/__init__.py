"""The partition server: one part of a graph served over the RPC layer.

* :class:`PartitionServer`: loads a part through the store plugins, serves it.
* :class:`PartitionOps`: the ``meta``, ``sample``, ``get``, ``sizes`` and
  ``edge_index`` handlers.
"""

from pyg_dist.server.partition_ops import PartitionOps
from pyg_dist.server.partition_server import PartitionServer

__all__ = ["PartitionOps", "PartitionServer"]
