"""Fixtures of the multi-host tests: simulated hosts and a two-part Cora.

Every server host receives only what the docs say it needs: ``meta.json``,
the partition book and its own ``part-K/`` (:func:`support.hosts.host_files`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.hosts import sim_hosts  # noqa: F401 (the fixture)

from pyg_dist.datasets import cora
from pyg_dist.partitioning.writer import partition


@pytest.fixture(scope="session")
def cora2_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("multihost") / "cora2"
    partition(cora(), 2, root)
    return root
