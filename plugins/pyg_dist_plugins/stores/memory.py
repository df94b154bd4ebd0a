"""The ``memory`` stores: a part's tensors read into RAM."""

from __future__ import annotations

from typing import Any

from pyg_dist.partitioning import PartitionReader
from pyg_dist.store.local import PartitionFeatureStore, PartitionGraphStore
from pyg_dist_plugins.stores import check_no_options


def memory_feature_store(reader: PartitionReader, part: int,
                         **options: Any) -> PartitionFeatureStore:
    """A feature store over part ``part``, its features read into RAM.

    Args:
        reader: The dataset.
        part: The part to serve.
        **options: None are accepted.
    """
    check_no_options("memory feature", options)
    return PartitionFeatureStore.from_part(reader.load_part(part, mmap=False, topology=False))


def memory_graph_store(reader: PartitionReader, part: int,
                       **options: Any) -> PartitionGraphStore:
    """A graph store over part ``part``, its topology read into RAM.

    Args:
        reader: The dataset.
        part: The part to serve.
        **options: None are accepted.
    """
    check_no_options("memory graph", options)
    data = reader.load_part(part, mmap=False, features=False)
    sizes = {t: reader.num_nodes_of(t) for t in reader.node_types}
    return PartitionGraphStore.from_part(data, sizes)
