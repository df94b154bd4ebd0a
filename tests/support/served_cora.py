"""Cora and a small heterogeneous graph, partitioned and served by real
``pyg-dist serve`` processes on loopback.

Shared by the loader and sampler tests through the root ``conftest.py``.

Starting server processes is the slow part of these tests, so every cluster
(one per graph and part count) is started once per session and shared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from torch_geometric.data import Data, HeteroData

from pyg_dist.datasets import cora, fake_hetero
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.connect import connect
from support.servers import serve_parts


class ServedGraph:
    """Lazily partitions and serves a graph per part count; stops all on close."""

    def __init__(self, data: Data | HeteroData, workdir, name: str = "cora") -> None:
        self.data = data
        self.workdir = workdir
        self.name = name
        self.stack = contextlib.ExitStack()
        self.stores: dict[int, tuple] = {}

    def get(self, num_parts: int) -> tuple:
        if num_parts not in self.stores:
            root = str(self.workdir / f"{self.name}{num_parts}")
            partition(self.data, num_parts, root)
            cluster = self.stack.enter_context(serve_parts(root, forwarding=True))
            fs, gs = connect(cluster.endpoints)
            self.stack.callback(fs.close)
            self.stores[num_parts] = (fs, gs)
        return self.stores[num_parts]


@pytest.fixture(scope="session")
def cora_data() -> Data:
    """Cora, loaded once per session."""
    return cora()


@pytest.fixture(scope="session")
def cora2_root(cora_data, tmp_path_factory):
    """Cora split into two parts by METIS, written once per session. Read
    only: a test that changes files copies it first."""
    root = tmp_path_factory.mktemp("cora2") / "cora-2"
    partition(cora_data, 2, str(root), partitioner="metis")
    return root


@pytest.fixture(scope="session")
def served_cora(cora_data, tmp_path_factory) -> Iterator[ServedGraph]:
    """One cluster per part count, started on first use, stopped at session end."""
    served = ServedGraph(cora_data, tmp_path_factory.mktemp("served-cora"))
    with served.stack:
        yield served


@pytest.fixture(scope="session")
def hetero_data() -> HeteroData:
    """A FakeHeteroDataset graph: 3 node types (~400 nodes each, features
    ``x``, labels and masks on ``v0``) and 6 edge types."""
    return fake_hetero(num_nodes=400, avg_degree=3.0, num_channels=8, seed=5)


@pytest.fixture(scope="session")
def served_hetero(hetero_data, tmp_path_factory) -> Iterator[ServedGraph]:
    """``hetero_data`` served per part count, started on first use."""
    served = ServedGraph(hetero_data, tmp_path_factory.mktemp("served-hetero"), "hetero")
    with served.stack:
        yield served
