"""A two-part Cora dataset and real server processes serving it."""

from __future__ import annotations

import pytest
from support.servers import serve_parts

import pyg_dist
from pyg_dist.partitioning import PartitionReader

MAX_MESSAGE_BYTES = 1 << 20


@pytest.fixture(scope="session")
def cora_root(tmp_path_factory, cora_data):
    root = tmp_path_factory.mktemp("server-cora") / "cora-2"
    pyg_dist.partition(cora_data, 2, root, partitioner="metis")
    return root


@pytest.fixture(scope="session")
def cora_reader(cora_root):
    return PartitionReader(cora_root)


@pytest.fixture(scope="session")
def cora_cluster(cora_root):
    args = ["--workers", "2", "--max-message-bytes", str(MAX_MESSAGE_BYTES)]
    with serve_parts(cora_root, serve_args=args) as cluster:
        yield cluster
