"""The ``mmap`` stores: a part's tensors memory-mapped from its safetensors files.

Pages load on first touch and stay shared with the page cache, so a server
over a part larger than it wants to copy starts at once, and several servers
on one host share the same pages. The mapping is private (copy-on-write):
writes through the store never reach the files.
"""

from __future__ import annotations

from typing import Any

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
    return PartitionFeatureStore.from_part(reader.load_part(part, mmap=True, topology=False))


def mmap_graph_store(reader: PartitionReader, part: int,
                     **options: Any) -> PartitionGraphStore:
    """A graph store over part ``part``, its topology memory-mapped.

    Args:
        reader: The dataset.
        part: The part to serve.
        **options: None are accepted.
    """
    check_no_options("mmap graph", options)
    data = reader.load_part(part, mmap=True, features=False)
    sizes = {t: reader.num_nodes_of(t) for t in reader.node_types}
    return PartitionGraphStore.from_part(data, sizes)
