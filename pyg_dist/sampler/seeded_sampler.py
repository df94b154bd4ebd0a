"""What a loader needs from a sampler to make batches reproducible.

PyG's :class:`~torch_geometric.sampler.BaseSampler` is all a loader needs to
*produce* batches (``sample_from_nodes`` and ``edge_permutation``). A loader
that keeps several batches in flight on worker threads needs one thing more
to keep them *reproducible*: a way to fix each batch's randomness in batch
order, on the consumer's thread, before a worker samples it. That is
:class:`SeededSampler`: ``draw_seed()`` hands out the seed of the next batch
and ``sample_from_nodes(index, seed=...)`` samples with it.

It is a structural type (:class:`typing.Protocol`), checked by what a
sampler can do rather than by its class, so a third-party sampler takes part
by having the two methods: :class:`~pyg_dist.sampler.DistNeighborSampler` is
both a PyG ``BaseSampler`` and a ``SeededSampler``. A ``BaseSampler`` that
is not seeded (PyG's own ``NeighborSampler``, say) still works in
:class:`~pyg_dist.loader.DistNeighborLoader`: it draws its own randomness
wherever it samples, so its batches depend on thread timing.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

from torch_geometric.sampler import NodeSamplerInput, SamplerOutput


@runtime_checkable
class SeededSampler(Protocol):
    """A sampler whose batches are fixed by a seed drawn ahead of sampling.

    Implementations must make ``sample_from_nodes(index, seed=s)`` depend
    only on ``index``, ``s`` and the graph, and ``draw_seed`` thread-safe.
    """

    def draw_seed(self) -> int:
        """Draws the random seed of the next batch (called in batch order).

        Returns:
            A non-negative int to pass to :meth:`sample_from_nodes`.
        """

    def sample_from_nodes(self, index: NodeSamplerInput, seed: Optional[int] = None,
                          **kwargs: Any) -> SamplerOutput:
        """Samples the subgraph around ``index``'s seed nodes with ``seed``.

        Args:
            index: The seed nodes and their input ids, as in PyG.
            seed: The batch's seed from :meth:`draw_seed`; ``None`` draws one.
            **kwargs: PyG's ``BaseSampler`` interface.

        Returns:
            PyG's ``SamplerOutput`` with ``metadata = (input_id, seed_time)``.

        A sampler used by :class:`~pyg_dist.loader.DistLinkNeighborLoader`
        also takes ``seed=`` in ``sample_from_edges(index, neg_sampling,
        seed=...)``.
        """
