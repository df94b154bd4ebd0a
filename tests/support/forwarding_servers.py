"""Partition servers in this process that forward among themselves."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from pyg_dist.server import PartitionServer


@contextlib.contextmanager
def forwarding_servers(root, parts: Sequence[int] = (0, 1)) -> Iterator[list[str]]:
    """The ``parts`` of the dataset at ``root`` as real servers on loopback,
    each the others' peer (``sample_tree`` is served); yields their
    endpoints and stops them all afterwards, whatever happened."""
    endpoints: list[str] = []
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(PartitionServer(root, part, peers=lambda: endpoints))
                   for part in parts]
        endpoints += [s.endpoint for s in servers]
        yield endpoints
