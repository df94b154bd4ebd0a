"""Shared-memory segments seen from the tests: segments are memfd (no file);
files under /dev/shm are what earlier versions made, or a leak."""

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


def has_file(segment) -> bool:
    """Whether a file of ``segment``'s name exists in ``/dev/shm`` (never,
    for a memfd segment: tests check their own segments only, since another
    run on the machine may make or remove files meanwhile)."""
    return os.path.join(SHM_DIR, segment.name) in segment_files()


def descriptor_open(segment) -> bool:
    """Whether ``segment``'s descriptor is open for a server to map it."""
    return segment.path is not None and os.path.exists(segment.path)
