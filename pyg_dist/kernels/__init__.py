"""Pure-torch graph kernels used by the partition server.

* :func:`sample_neighbors`: exact, vectorised one-hop sampling over CSC.
"""

from pyg_dist.kernels.neighbor_sample import sample_neighbors, segment_arange

__all__ = ["sample_neighbors", "segment_arange"]
