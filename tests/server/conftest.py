"""A two-part Cora dataset and real server processes serving it."""

from __future__ import annotations

import pytest
from support.servers import serve_parts

from pyg_dist.partitioning import PartitionReader

MAX_MESSAGE_BYTES = 1 << 20


@pytest.fixture(scope="session")
def cora_reader(cora2_root):
    return PartitionReader(cora2_root)


@pytest.fixture(scope="session")
def cora_cluster(cora2_root):
    args = ["--workers", "2", "--max-message-bytes", str(MAX_MESSAGE_BYTES)]
    with serve_parts(cora2_root, serve_args=args) as cluster:
        yield cluster
