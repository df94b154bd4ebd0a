"""Pure-torch graph kernels used by the partition server.

* :func:`sample_neighbors`: exact, vectorised one-hop sampling over CSC.
* :func:`sample_segments`: the same over segments the caller looked up.
"""

from pyg_dist.kernels.neighbor_sample import sample_neighbors, sample_segments, segment_arange

__all__ = ["sample_neighbors", "sample_segments", "segment_arange"]
