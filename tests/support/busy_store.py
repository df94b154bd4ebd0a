"""A feature-store plugin whose reads keep a worker busy for a long time:
each read marks its start (a file in ``$BUSY_STORE_DIR``) and then spins
the CPU in Python for ``BUSY_STORE_SECONDS`` (60 by default) before
answering. It stands for a heavy batch in flight (a products-scale hop), so
tests can stop a server whose every worker is inside an operation.

Registered in a ``pyg-dist serve`` process through a ``.dist-info``
directory on ``PYTHONPATH`` (:func:`install_dist_info`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from pyg_dist.partitioning import PartitionReader
from pyg_dist.store.local import PartitionFeatureStore

NAME = "busy"
ENTRY_POINT = "support.busy_store:busy_feature_store"


class BusyFeatureStore(PartitionFeatureStore):
    """The part's features, each read after a long spin of the CPU."""

    def get_tensor(self, *args: Any, **kwargs: Any) -> Any:
        marks = os.environ.get("BUSY_STORE_DIR")
        if marks:
            open(os.path.join(marks, f"{os.getpid()}-{time.monotonic_ns()}"), "w").close()
        end = time.monotonic() + float(os.environ.get("BUSY_STORE_SECONDS", "60"))
        spins = 0
        while time.monotonic() < end:
            spins += 1  # Python work: the thread competes for the GIL too
        return super().get_tensor(*args, **kwargs)


def busy_feature_store(reader: PartitionReader, part: int,
                       **options: Any) -> BusyFeatureStore:
    """Plugin factory (the ``memory`` store's signature)."""
    return BusyFeatureStore.from_part(reader.load_part(part, mmap=False, topology=False))


def install_dist_info(directory: str | os.PathLike) -> None:
    """Writes a distribution's metadata into ``directory`` that registers
    this plugin for a process with ``directory`` and ``tests/`` on its
    ``PYTHONPATH``."""
    info = os.path.join(directory, "busy_store-0.0.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: busy-store\nVersion: 0.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write(f"[pyg_dist.feature_stores]\n{NAME} = {ENTRY_POINT}\n")
