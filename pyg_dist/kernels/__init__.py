"""Pure-torch graph kernels used by the partition server.

* :func:`sample_segments`: exact, vectorised one-hop sampling over CSC
  segments the caller looked up.
* :func:`sample_weighted_segments`: by edge weight (:mod:`.weighted_sample`);
  with replacement over whole columns in O(1) a draw given the alias tables
  of :func:`build_alias_table` (:mod:`.alias`), built once per weight.
* :func:`sample_time_sorted`: no neighbour from a seed's future, uniform,
  by weight or most recent, over segments sorted by time once
  (:func:`sort_by_time`), the past of a seed a prefix found by binary
  search (:mod:`.time_sorted`).

The weighted kernel works on a padded ``[seeds, max degree]``
matrix (for big frontiers one per group of seeds of similar degree), or,
for frontiers where that padding costs too much, narrow every segment to
the entries it may draw from (:mod:`.candidates`) first.
"""

from pyg_dist.kernels.alias import AliasTable, build_alias_table, sample_alias
from pyg_dist.kernels.neighbor_sample import sample_segments, segment_positions
from pyg_dist.kernels.time_sorted import (
    TEMPORAL_STRATEGIES,
    past_counts,
    sample_time_sorted,
    sort_by_time,
)
from pyg_dist.kernels.weighted_sample import sample_weighted_segments

__all__ = ["TEMPORAL_STRATEGIES", "AliasTable", "build_alias_table", "past_counts",
           "sample_alias", "sample_segments",
           "sample_time_sorted", "sample_weighted_segments",
           "segment_positions", "sort_by_time"]
