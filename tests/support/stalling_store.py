"""Feature-store plugins whose reads wait until a test lets them go: a read
that waits on a disk (a row of a mapped part not in the page cache), made
as long as the test needs. ``stalling`` says so (``reads_may_block``),
``stalling-unsaid`` does not. For in-process servers only: the event lives
in this process."""

from __future__ import annotations

import threading
from typing import Any

from pyg_dist.partitioning import PartitionReader
from pyg_dist.store.local import PartitionFeatureStore

RELEASE = threading.Event()
"""Set by the test to let every waiting read go on."""
STARTED = threading.Event()
"""Set by a read when it starts waiting."""


class StallingFeatureStore(PartitionFeatureStore):
    """The part's features; every read waits for :data:`RELEASE`."""

    reads_may_block = True

    def get_tensor(self, *args: Any, **kwargs: Any) -> Any:
        STARTED.set()
        RELEASE.wait(60)
        return super().get_tensor(*args, **kwargs)


class UnsaidStallingFeatureStore(StallingFeatureStore):
    """The same, without saying that its reads may wait."""

    reads_may_block = False


def stalling_feature_store(reader: PartitionReader, part: int,
                           **options: Any) -> StallingFeatureStore:
    """Plugin factory (the ``memory`` store's signature)."""
    return StallingFeatureStore.from_part(reader.load_part(part, topology=False))


def unsaid_stalling_feature_store(reader: PartitionReader, part: int,
                                  **options: Any) -> UnsaidStallingFeatureStore:
    """Plugin factory of the store that does not say its reads may wait."""
    return UnsaidStallingFeatureStore.from_part(reader.load_part(part, topology=False))
