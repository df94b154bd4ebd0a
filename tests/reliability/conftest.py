"""Fixtures for the reliability suite: Cora in two parts, real server
processes, and helpers that check a batch against the original graph.

Every server here is a real ``pyg-dist serve`` process on loopback, started
through :mod:`support.servers` and stopped in teardown.
"""

from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.datasets import cora


@pytest.fixture(scope="session")
def cora_data():
    return cora()


@pytest.fixture(scope="session")
def cora2_root(tmp_path_factory, cora_data):
    """Cora split into two parts (random partitioner: fast and deterministic)."""
    root = tmp_path_factory.mktemp("reliability-cora") / "cora-2"
    pyg_dist.partition(cora_data, 2, root, partitioner="random")
    return root


@pytest.fixture(scope="session")
def edge_keys(cora_data):
    """Sorted ``src * N + dst`` keys of Cora's edges, for membership checks."""
    n = cora_data.num_nodes
    return torch.sort(cora_data.edge_index[0] * n + cora_data.edge_index[1]).values

