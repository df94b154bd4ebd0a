"""Sparse optimisers of :class:`pyg_dist.DistEmbedding`, applied on the
partition servers: :class:`SGD`, :class:`SparseAdam`, :class:`SparseAdagrad`."""

from __future__ import annotations

from pyg_dist.optim.sparse import SGD, DistSparseOptimizer, SparseAdagrad, SparseAdam

__all__ = ["DistSparseOptimizer", "SGD", "SparseAdagrad", "SparseAdam"]
