"""The iteration seam of a loader over served graphs, shared by node and link loaders.

A loader that mixes in :class:`DistIteration` yields its batches on one of
three paths: synchronously on the caller's thread (``prefetch=0``), on
worker threads ``prefetch`` batches ahead
(:class:`~pyg_dist.loader.prefetch.PrefetchPipeline`), or in the
``DataLoader``'s own worker processes (``num_workers > 0``). The loader
supplies ``_produce(item)`` (samples and joins one batch, thread-safe, given
an item of ``_work_items()``: a batch of input positions and its random
seed, drawn in order on the caller's thread); everything else (its
constructor's DDP set-up, epochs, the DDP reshuffle, pinning, the copy to
``device``) is here, and so are the two things a rank's share means for its user: ``len(loader)``
and ``len(loader.dataset)`` count this rank's batches and inputs (a tqdm bar
over them reaches 100%), and :meth:`DistIteration.gather` puts every rank's
outputs back together in input order (layer-wise inference).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor

from pyg_dist.errors import LoaderError
from pyg_dist.loader.arguments import check_dataloader_kwargs, pins_memory
from pyg_dist.loader.ddp import ddp_layout, per_rank_batch_size, rank_sampler
from pyg_dist.loader.index_batches import index_batches
from pyg_dist.sampler.seeded_sampler import SeededSampler


class DistIteration:
    """Mixin placed before PyG's ``NodeLoader`` / ``LinkLoader`` in the bases.

    The loader's constructor calls :meth:`_set_up` before it reads its
    inputs and :meth:`_share_inputs` once it knows how many there are, both
    before PyG's constructor.
    """

    prefetch: int
    device: Any
    _epoch: int
    _rank_sampler: Any
    _sampler: Any
    _seeded: bool

    def _set_up(self, kwargs: dict[str, Any], *, prefetch: int, device: Any,
                rank: Optional[int], world_size: Optional[int], split: bool,
                global_batch_size: Optional[int], filter_per_worker: Optional[bool]) -> bool:
        """Checks ``prefetch`` and the ``DataLoader`` arguments in ``kwargs``
        (:func:`~pyg_dist.loader.arguments.check_dataloader_kwargs`), sets the
        DDP layout and this rank's ``batch_size`` in ``kwargs``.

        Returns:
            Whether the inputs are split across DDP ranks.
        """
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise LoaderError(f"prefetch must be an int >= 0, got {prefetch!r}")
        self.rank, self.world_size = ddp_layout(rank, world_size)
        self.split = bool(split)
        ddp = self.world_size > 1 and self.split
        per_rank_batch_size(kwargs, global_batch_size, self.world_size if ddp else 1,
                            training=bool(kwargs.get("shuffle")))
        check_dataloader_kwargs(kwargs, prefetch=prefetch, ddp=ddp,
                                filter_per_worker=filter_per_worker)
        self.prefetch, self.device, self._epoch, self._rank_sampler = prefetch, device, 0, None
        return ddp

    def _share_inputs(self, kwargs: dict[str, Any], num_inputs: int, sampler: Any, *,
                      ddp: bool, seed: Optional[int]) -> None:
        """This rank's share of ``num_inputs`` inputs under DDP (a
        ``DistributedSampler`` put in ``kwargs``, shuffled with ``seed``), and
        ``sampler``, whose seeds :meth:`_work_items` draws."""
        if ddp:
            self._rank_sampler = rank_sampler(num_inputs, self.rank, self.world_size, kwargs,
                                              seed=0 if seed is None else seed)
            kwargs["sampler"] = self._rank_sampler
        self._sampler = sampler
        self._seeded = isinstance(sampler, SeededSampler)

    # DataLoader's __init__ sets ``self.dataset`` (the positions of all the
    # inputs); reading it gives this rank's share of them.
    @property
    def dataset(self) -> Sequence[int]:
        """The positions of the inputs this rank iterates: ``len()`` is this
        rank's count (the whole input under no split), as a tqdm bar over
        ``len(loader.dataset)`` expects."""
        if self._rank_sampler is None:
            return self._all_inputs
        return RankShare(self._all_inputs, len(self._rank_sampler))

    @dataset.setter
    def dataset(self, value: Sequence[int]) -> None:
        self._all_inputs = value

    def gather(self, rows: Union[Tensor, Sequence[Tensor]]) -> Tensor:
        """Every rank's outputs of the last epoch, in input order.

        What ``torch.cat(rows)`` is for an unsplit, unshuffled loader (e.g.
        PyG's layer-wise ``inference``, which concatenates the rows of each
        batch's seeds): under DDP each rank passes the rows of its own
        share, and every rank gets all of them, row ``i`` for input ``i``
        (a node id when ``input_nodes`` is ``None``). Padded inputs (the
        split gives every rank as many) are written once.

        Args:
            rows: This rank's outputs, one row per input in iteration order:
                a tensor, or the per-batch tensors to concatenate.

        Raises:
            LoaderError: if the rows do not match this rank's inputs, or an
                unsplit loader shuffles (its order is not recorded).
        """
        from pyg_dist.loader.evaluation import gather_rows

        rows = rows if isinstance(rows, Tensor) else torch.cat(list(rows), dim=0)
        return gather_rows(rows, self._positions(rows.size(0)), len(self._all_inputs))

    def _positions(self, num_rows: int) -> Tensor:
        """The input positions of this rank's last ``num_rows`` outputs."""
        if self._rank_sampler is not None:
            positions = torch.tensor(list(self._rank_sampler), dtype=torch.long)
        elif isinstance(self.sampler, torch.utils.data.SequentialSampler):
            positions = torch.arange(len(self._all_inputs))
        else:
            raise LoaderError("gather() needs the inputs in order: build this loader with "
                              "shuffle=False")
        if num_rows != positions.numel() and not (self.drop_last
                                                  and num_rows < positions.numel()):
            raise LoaderError(f"gather() got {num_rows} rows, but this rank iterated "
                              f"{positions.numel()} inputs; pass one row per input (the "
                              f"first batch_size rows of each batch)")
        return positions[:num_rows]

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
                                    pin_memory=pin, workers=self._prefetch_workers())(items)
        return (self._deliver(self._produce(item), pin, pinned=pin) for item in items)

    def _prefetch_workers(self) -> Optional[int]:
        """Worker threads of the prefetch pipeline: one where every part is
        served in this process (``connect(colocate=True)``), else one per
        batch in flight (``None``).

        A batch that waits on no server runs Python and small torch ops from
        start to end, and every such op hands the GIL over: four workers
        doing so at once spent 3x the CPU of one on the same batches (2-core
        machine, a sparse graph), for no batch sooner. One worker still
        produces ``prefetch`` batches ahead while the model trains."""
        graph_store = self.data[1] if isinstance(getattr(self, "data", None), tuple) else None
        parts = getattr(graph_store, "colocated_parts", ())
        router = getattr(graph_store, "router", None)
        return 1 if parts and router is not None and len(parts) == router.num_parts else None

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

    def _work_items(self) -> Iterator[tuple[Union[list[int], Tensor], Optional[int]]]:
        """The epoch's batches of input positions, each with its random seed.

        Drawn lazily, in order, on the consumer's thread; a sampler that is
        not a :class:`~pyg_dist.sampler.SeededSampler` gets ``None`` and
        draws its own randomness. The positions are an int64 tensor under
        torch's own batch sampler (:func:`~pyg_dist.loader.index_batches.index_batches`),
        else the batch sampler's list.
        """
        batches = index_batches(self.batch_sampler) or self.batch_sampler
        for index in batches:
            yield index, (self._sampler.draw_seed() if self._seeded else None)

    def _produce(self, item: Any) -> Any:  # pragma: no cover - supplied by the loader
        raise NotImplementedError


class RankShare(Sequence):
    """A rank's share of a loader's input positions, as ``loader.dataset``.

    ``len()`` is the share's size; indexing takes a global position (what
    the rank's sampler yields) to itself, as the full ``range`` does, so
    ``DataLoader`` worker processes fetch through it unchanged.

    Args:
        positions: Every input position (``range(num_inputs)``).
        size: How many this rank iterates.
    """

    def __init__(self, positions: Sequence[int], size: int) -> None:
        self._positions = positions
        self._size = size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: Any) -> Any:
        return self._positions[index]
