"""The shared-memory segment files pyg-dist makes, seen from the tests."""

from __future__ import annotations

import glob
import os

import pytest

from pyg_dist.rpc import shm
from pyg_dist.rpc.shm import SHM_DIR

needs_shm = pytest.mark.skipif(shm.host_id() is None, reason="this host has no usable /dev/shm")
"""Skips a test module where /dev/shm cannot be used (``pytestmark = needs_shm``)."""


def segment_files() -> set[str]:
    """Paths of every pyg-dist segment file now in ``/dev/shm``."""
    return set(glob.glob(os.path.join(SHM_DIR, "pyg-dist-shm-*")))
