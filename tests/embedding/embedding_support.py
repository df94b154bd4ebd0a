"""Partition servers in this process for the embedding tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pyg_dist.server import PartitionServer


@contextlib.contextmanager
def serving(root, num_parts: int, **options) -> Iterator[list[PartitionServer]]:
    """Every part of ``root`` served in this process; all stopped on exit."""
    servers: list[PartitionServer] = []
    try:
        for part in range(num_parts):
            servers.append(PartitionServer(root, part, **options))
            servers[-1].start()
        yield servers
    finally:
        for server in servers:
            server.stop()
