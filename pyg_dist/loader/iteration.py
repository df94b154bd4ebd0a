"""The iteration seam of a loader over served graphs, shared by node and link loaders.

A loader that mixes in :class:`DistIteration` yields its batches on one of
three paths: synchronously on the caller's thread (``prefetch=0``), on
worker threads ``prefetch`` batches ahead
(:class:`~pyg_dist.loader.prefetch.PrefetchPipeline`), or in the
``DataLoader``'s own worker processes (``num_workers > 0``). It supplies two
methods: ``_work_items()`` (the epoch's batches of input positions, each
with its random seed, drawn in order on the caller's thread) and
``_produce(item)`` (samples and joins one batch, thread-safe); everything
else (epochs, the DDP reshuffle, pinning, the copy to ``device``) is here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from pyg_dist.errors import LoaderError
from pyg_dist.loader.arguments import pins_memory


class DistIteration:
    """Mixin placed before PyG's ``NodeLoader`` / ``LinkLoader`` in the bases.

    The loader sets ``prefetch``, ``device``, ``_epoch`` (0) and
    ``_rank_sampler`` (a ``DistributedSampler`` or ``None``) in its
    constructor.
    """

    prefetch: int
    device: Any
    _epoch: int
    _rank_sampler: Any

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch`` (whose DDP shuffle it
        then takes), e.g. after resuming from a checkpoint; epochs count on
        by one per iteration from there.

        Args:
            epoch: The epoch number, ``>= 0``.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise LoaderError(f"epoch must be an int >= 0, got {epoch!r}")
        self._epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        if self._rank_sampler is not None:
            # Reshuffle every epoch, identically on every rank.
            self._rank_sampler.set_epoch(self._epoch)
        self._epoch += 1
        if self.num_workers > 0:
            # DataLoader worker processes; each opens its own connections.
            return self._from_worker_processes()
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        """Yields the epoch's batches (the seam a prefetch pipeline plugs into)."""
        items = self._work_items()
        # Decided per epoch, as DataLoader decides it per iterator.
        pin = pins_memory(self.pin_memory)
        if self.prefetch > 0:
            from pyg_dist.loader.prefetch import PrefetchPipeline

            return PrefetchPipeline(self._produce, self.prefetch, device=self.device,
                                    pin_memory=pin)(items)
        return (self._deliver(self._produce(item), pin, pinned=pin) for item in items)

    def _from_worker_processes(self) -> Iterator[Any]:
        """The ``DataLoader``'s own iteration, batches moved to ``device``.

        With ``filter_per_worker=False`` the workers send ``SamplerOutput``
        and the features are joined here, so they are pinned here.
        """
        batches = super().__iter__()  # warns as DataLoader does about pin_memory
        pin = pins_memory(self.pin_memory, warn=False)
        for batch in batches:
            yield self._deliver(batch, pin and not self.filter_per_worker, pinned=pin)

    def _deliver(self, batch: Any, pin: bool, *, pinned: bool) -> Any:
        """Pins ``batch`` if ``pin`` and moves it to ``device``, if any.

        ``pinned`` says the batch is pinned by now, so the copy can be
        asynchronous.
        """
        if pin:
            batch = batch.pin_memory()
        if self.device is not None:
            batch = batch.to(torch.device(self.device), non_blocking=pinned)
        return batch

    def _work_items(self) -> Iterator[Any]:  # pragma: no cover - supplied by the loader
        raise NotImplementedError

    def _produce(self, item: Any) -> Any:  # pragma: no cover - supplied by the loader
        raise NotImplementedError
