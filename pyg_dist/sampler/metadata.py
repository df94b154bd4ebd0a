"""``SamplerOutput.metadata`` that refuses PyG's reading of features from it.

PyG's ``NodeLoader.filter_fn`` and ``LinkLoader.filter_fn`` special-case any
sampler whose class is *named* ``DistNeighborSampler`` (PyG's deprecated
``torch_geometric.distributed`` one, which ships the batch's features in the
last three ``metadata`` entries): they skip the feature store and take
``x, y, edge_attr = metadata[-3], metadata[-2], metadata[-1]``. Our sampler
bears the same name, does not ship features, and its link ``metadata`` has
four or five entries, so PyG's ``LinkNeighborLoader`` used to build batches
whose ``x`` was the int64 ``edge_label_index``, silently, and its
``NodeLoader`` failed with a bare ``IndexError``.

That hack is the only reader of ``metadata`` from the end (PyG's loaders and
ours index it from the front), so :class:`SamplerMetadata` is a tuple whose
negative integer indices raise :class:`~pyg_dist.errors.SamplerError` naming
the loader to use instead. Iteration, unpacking, slices and equality are a
plain tuple's.
"""

from __future__ import annotations

from typing import Any

from pyg_dist.errors import SamplerError

FOREIGN_LOADER_MESSAGE = (
    "pyg_dist's DistNeighborSampler was given to PyG's own NodeLoader/LinkLoader "
    "(NeighborLoader, LinkNeighborLoader), which take the features of any sampler class "
    "named 'DistNeighborSampler' from SamplerOutput.metadata[-3:], where pyg_dist puts "
    "none: the batch would be wrong. Use pyg_dist.DistNeighborLoader or "
    "pyg_dist.DistLinkNeighborLoader with the same arguments, or PyG's loader without "
    "neighbor_sampler= (it then samples over the (feature_store, graph_store) pair itself)")


class SamplerMetadata(tuple):
    """A tuple that refuses negative integer indices (see the module docstring)."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int) and key < 0:
            raise SamplerError(FOREIGN_LOADER_MESSAGE)
        return super().__getitem__(key)

    def __reduce__(self) -> Any:
        # Pickled (DataLoader worker processes) as what it is.
        return (SamplerMetadata, (tuple(self),))
