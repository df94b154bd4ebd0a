"""Cora, partitioned and served by real ``pyg-dist serve`` processes on loopback.

Shared by the loader and sampler tests through the root ``conftest.py``.

Starting server processes is the slow part of these tests, so every cluster
(one per part count) is started once per session and shared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from torch_geometric.data import Data

from pyg_dist.datasets import cora
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.connect import connect
from support.servers import serve_parts


class ServedCora:
    """Lazily partitions and serves Cora per part count; stops all on close."""

    def __init__(self, data: Data, workdir) -> None:
        self.data = data
        self.workdir = workdir
        self.stack = contextlib.ExitStack()
        self.stores: dict[int, tuple] = {}

    def get(self, num_parts: int) -> tuple:
        if num_parts not in self.stores:
            root = str(self.workdir / f"cora{num_parts}")
            partition(self.data, num_parts, root)
            cluster = self.stack.enter_context(serve_parts(root))
            fs, gs = connect(cluster.endpoints)
            self.stack.callback(fs.close)
            self.stores[num_parts] = (fs, gs)
        return self.stores[num_parts]


@pytest.fixture(scope="session")
def cora_data() -> Data:
    """Cora, loaded once per session."""
    return cora()


@pytest.fixture(scope="session")
def served_cora(cora_data, tmp_path_factory) -> Iterator[ServedCora]:
    """One cluster per part count, started on first use, stopped at session end."""
    served = ServedCora(cora_data, tmp_path_factory.mktemp("served-cora"))
    with served.stack:
        yield served
