"""Bundled cache policies (``degree``, ``frequency``, ``halo``), registered
through the ``pyg_dist.cache_policies`` entry points; the contract is in
:mod:`pyg_dist.store.cache_policy`."""
