"""Fixtures of the sampler tests: Cora served in 3 parts (tests/support/served_cora.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def cora_stores3(served_cora) -> tuple:
    """``(fs, gs)`` over Cora split into 3 parts."""
    return served_cora.get(3)
