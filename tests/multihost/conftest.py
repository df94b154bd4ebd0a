"""Fixtures of the multi-host tests: simulated hosts (the two-part Cora,
``cora2_root``, is the suite's own).

Every server host receives only what the docs say it needs: ``meta.json``,
the partition book and its own ``part-K/`` (:func:`support.hosts.host_files`).
"""

from __future__ import annotations

from support.hosts import sim_hosts  # noqa: F401 (the fixture)
