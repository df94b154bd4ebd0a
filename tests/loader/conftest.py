"""Fixtures of the loader tests: Cora and a heterogeneous graph served in 2 and 3
parts (tests/support/served_cora.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[2, 3], ids=["2parts", "3parts"])
def cora_stores(request, served_cora) -> tuple:
    """``(fs, gs)`` over Cora split into 2 and 3 parts."""
    return served_cora.get(request.param)


@pytest.fixture
def cora_stores3(served_cora) -> tuple:
    """``(fs, gs)`` over Cora split into 3 parts."""
    return served_cora.get(3)


@pytest.fixture(params=[2, 3], ids=["2parts", "3parts"])
def hetero_stores(request, served_hetero) -> tuple:
    """``(fs, gs)`` over the heterogeneous test graph split into 2 and 3 parts."""
    return served_hetero.get(request.param)
