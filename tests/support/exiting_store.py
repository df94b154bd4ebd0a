"""A feature-store plugin whose reads end the serving thread: it raises
``SystemExit``, which no message loop may swallow. It stands for any failure
that must stop a server (a broken socket cannot be provoked from outside),
so tests can check that such a server stops and says so: ``serve_forever``
raises, ``pyg-dist serve`` exits non-zero.

Registered in tests through a hand-made entry point (in-process) or a
``.dist-info`` directory on ``PYTHONPATH`` (for a ``pyg-dist serve``
process), see :func:`install_dist_info`.
"""

from __future__ import annotations

import os
from typing import Any

from pyg_dist.partitioning import PartitionReader
from pyg_dist.store.local import PartitionFeatureStore

NAME = "exiting"
ENTRY_POINT = "support.exiting_store:exiting_feature_store"


class ExitingFeatureStore(PartitionFeatureStore):
    """The part's features, but every read raises ``SystemExit(3)``."""

    def get_tensor(self, *args: Any, **kwargs: Any) -> Any:
        raise SystemExit(3)


def exiting_feature_store(reader: PartitionReader, part: int,
                          **options: Any) -> ExitingFeatureStore:
    """Plugin factory (the ``memory`` store's signature)."""
    return ExitingFeatureStore.from_part(reader.load_part(part, mmap=False, topology=False))


def install_dist_info(directory: str | os.PathLike) -> None:
    """Writes a distribution's metadata into ``directory`` that registers
    this plugin; a process with ``directory`` (and ``tests/``) on its
    ``PYTHONPATH`` finds it as if it were pip-installed."""
    info = os.path.join(directory, "exiting_store-0.0.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: exiting-store\nVersion: 0.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write(f"[pyg_dist.feature_stores]\n{NAME} = {ENTRY_POINT}\n")
