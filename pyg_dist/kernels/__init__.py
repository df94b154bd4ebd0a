"""Pure-torch graph kernels used by the partition server.

* :func:`sample_neighbors`: exact, vectorised one-hop sampling over CSC.
* :func:`sample_segments`: the same over segments the caller looked up.
* :func:`sample_weighted`: by edge weight (:mod:`.weighted_sample`).
* :func:`sample_temporal`: no neighbour from a seed's future, uniform or
  most recent (:mod:`.temporal_sample`).

The weighted and temporal kernels first narrow every segment to the entries
it may draw from (:mod:`.candidates`), then sample within those.
"""

from pyg_dist.kernels.candidates import Candidates
from pyg_dist.kernels.neighbor_sample import sample_neighbors, sample_segments, segment_arange
from pyg_dist.kernels.temporal_sample import TEMPORAL_STRATEGIES, past_entries, sample_temporal
from pyg_dist.kernels.weighted_sample import positive_entries, sample_weighted

__all__ = ["Candidates", "TEMPORAL_STRATEGIES", "past_entries", "positive_entries",
           "sample_neighbors", "sample_segments", "sample_temporal", "sample_weighted",
           "segment_arange"]
