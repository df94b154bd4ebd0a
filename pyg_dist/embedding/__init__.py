"""Learnable node embeddings served by the partition servers
(:class:`DistEmbedding`); their optimisers are :mod:`pyg_dist.optim`."""

from __future__ import annotations

from pyg_dist.embedding.dist_embedding import DistEmbedding

__all__ = ["DistEmbedding"]
