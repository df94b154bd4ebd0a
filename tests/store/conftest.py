"""Cora in 3 parts, served by real server processes, for the remote store tests."""

from __future__ import annotations

import pytest
from support.servers import serve_parts

from pyg_dist.datasets import cora
from pyg_dist.partitioning.writer import partition
from pyg_dist.store.connect import connect


@pytest.fixture(scope="session")
def data():
    return cora()


@pytest.fixture(scope="session")
def endpoints(data, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("cora3") / "parts")
    partition(data, 3, root)
    with serve_parts(root) as cluster:
        yield cluster.endpoints


@pytest.fixture
def store(endpoints):
    """A feature store connected to the Cora servers, closed afterwards."""
    fs, _ = connect(endpoints)
    try:
        yield fs
    finally:
        fs.close()
