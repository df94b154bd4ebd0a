"""Cora partitioned into 2 and 3 parts and served by in-process
``PartitionServer`` s (real ZeroMQ servers on loopback), shared by the tests
of one module; every test names its own embedding table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from embedding_support import serving

from pyg_dist.partitioning.writer import partition
from pyg_dist.store.connect import connect


@pytest.fixture(scope="session")
def cora_roots(cora_data, tmp_path_factory) -> dict[int, str]:
    """Cora in 2 and 3 parts (METIS), written once."""
    roots = {}
    for num_parts in (2, 3):
        root = tmp_path_factory.mktemp(f"emb-cora{num_parts}") / "cora"
        partition(cora_data, num_parts, str(root))
        roots[num_parts] = str(root)
    return roots


@pytest.fixture(scope="module")
def served(cora_roots) -> Iterator[dict[int, tuple]]:
    """``{num_parts: (fs, gs)}`` over in-process servers of each part count."""
    with contextlib.ExitStack() as stack:
        stores = {}
        for num_parts, root in cora_roots.items():
            servers = stack.enter_context(serving(root, num_parts))
            fs, gs = connect([s.endpoint for s in servers])
            stack.callback(fs.close)
            stores[num_parts] = (fs, gs)
        yield stores
