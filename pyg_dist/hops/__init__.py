"""Neighbour sampling hop by hop, below both the sampler and the server
(``sampler``, ``server`` -> ``hops`` -> ``routing`` -> ``rpc``).

:func:`~pyg_dist.hops.loop.sample_hops` is the one hop loop (PyG's
semantics, every graph as typed; a homogeneous graph is the one-type case).
It reads a :class:`~pyg_dist.hops.settings.HopSettings` and takes the
per-hop sampling function: :func:`~pyg_dist.hops.one_hop.sample_hop` over a
router, the trainer's to every server, a coordinating server's to its peers.
"""
