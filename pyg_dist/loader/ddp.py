"""Splitting a loader's input nodes across DDP ranks.

Every rank must take the same number of optimiser steps, or DDP's gradient
all-reduce waits forever on the rank that ran out of batches. The split uses
:class:`torch.utils.data.DistributedSampler`, which gives every rank exactly
``ceil(n / world_size)`` inputs (padding by wrapping around the shuffled
list, ``drop_last=False``) or ``floor(n / world_size)`` (truncating the tail,
``drop_last=True``); with one batch size for all ranks, the number of batches
is then equal too.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any, Optional

import torch
from torch.utils.data import DistributedSampler

from pyg_dist.errors import LoaderError

logger = logging.getLogger(__name__)


def ddp_layout(rank: Optional[int], world_size: Optional[int]) -> tuple[int, int]:
    """The ``(rank, world_size)`` a loader splits its inputs by.

    Args:
        rank: Explicit rank, or ``None`` to ask ``torch.distributed``.
        world_size: Explicit world size, or ``None`` to ask
            ``torch.distributed``.

    Returns:
        ``(0, 1)`` when neither is given and ``torch.distributed`` is not
        initialised.

    Raises:
        LoaderError: if only one of the two is given, or they are
            inconsistent.
    """
    if rank is None and world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        _warn_without_process_group()
        return 0, 1
    if rank is None or world_size is None:
        raise LoaderError("pass both rank and world_size, or neither (then they come from "
                          "torch.distributed)")
    if world_size < 1 or not 0 <= rank < world_size:
        raise LoaderError(f"need 0 <= rank < world_size, got rank={rank}, "
                          f"world_size={world_size}")
    return int(rank), int(world_size)


def _warn_without_process_group() -> None:
    """Warns when a launcher started several ranks but this one has no
    process group: every rank would then load every input node and train
    its own copy of the model, silently."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return
    if world > 1:
        warnings.warn(
            f"WORLD_SIZE={world} but torch.distributed is not initialised: this loader takes "
            f"every input node, and each of the {world} processes trains its own copy of "
            f"the model. Call torch.distributed.init_process_group() before building the "
            f"loader and wrap the model in DistributedDataParallel (docs/loader.md, "
            f"porting checklist), or pass rank= and world_size= explicitly",
            RuntimeWarning, stacklevel=4)


def rank_sampler(num_inputs: int, rank: int, world_size: int, loader_kwargs: dict[str, Any],
                 seed: int = 0) -> DistributedSampler:
    """Builds the sampler of this rank's share of the inputs.

    Takes ``shuffle`` out of ``loader_kwargs`` (a ``DataLoader`` refuses
    ``shuffle`` together with a ``sampler``) and honours ``drop_last``.

    Args:
        num_inputs: Number of input nodes (before splitting).
        rank: This process' rank.
        world_size: Number of ranks.
        loader_kwargs: The ``DataLoader`` keyword arguments; modified.
        seed: Shuffle seed; must be the same on every rank.

    Raises:
        LoaderError: if the caller passed its own ``sampler`` or
            ``batch_sampler``, or there are fewer inputs than ranks.
    """
    if loader_kwargs.get("sampler") is not None or loader_kwargs.get("batch_sampler") is not None:
        raise LoaderError("under torch.distributed the loader splits input nodes across ranks "
                          "itself; do not pass sampler= or batch_sampler= (or pass "
                          "split=False to opt out)")
    shuffle = bool(loader_kwargs.pop("shuffle", False))
    drop_last = bool(loader_kwargs.get("drop_last", False))
    if num_inputs < world_size:
        raise LoaderError(f"{num_inputs} inputs (nodes or links) cannot be split across "
                          f"{world_size} ranks; every rank needs at least one (or pass "
                          f"split=False)")
    sampler = DistributedSampler(range(num_inputs), num_replicas=world_size, rank=rank,
                                 shuffle=shuffle, seed=seed, drop_last=drop_last)
    logger.info("rank %d/%d takes %d of %d inputs (%s)", rank, world_size,
                sampler.num_samples, num_inputs,
                "tail truncated" if drop_last else "padded by wrapping")
    return sampler


def per_rank_batch_size(loader_kwargs: dict[str, Any], global_batch_size: Optional[int],
                        world_size: int, *, training: bool) -> None:
    """Sets ``loader_kwargs["batch_size"]`` from ``global_batch_size``, or
    warns once that a training loader's ``batch_size`` is per rank.

    ``batch_size`` keeps PyG's (and ``DataLoader``'s) per-process meaning:
    under DDP an optimiser step then takes ``batch_size * world_size``
    inputs, and an epoch ``world_size`` times fewer steps than the local
    script. ``global_batch_size=B`` gives every rank ``B // world_size``, so
    that a step takes ``B`` inputs as the local script's ``batch_size=B``.

    Args:
        loader_kwargs: The ``DataLoader`` keyword arguments; modified.
        global_batch_size: Inputs per optimiser step over all ranks, or
            ``None``.
        world_size: Ranks the inputs are split across (1 without a split).
        training: Whether the loader shuffles (a training loader); only
            those are warned about (evaluation does not depend on it).

    Raises:
        LoaderError: if both sizes are given, or ``global_batch_size`` is
            not an int ``>= world_size``.
    """
    if global_batch_size is None:
        size = loader_kwargs.get("batch_size", 1)
        if training and world_size > 1:
            warnings.warn(f"batch_size={size} is per rank, as in PyG: each optimiser step "
                          f"takes {size * world_size} inputs over {world_size} ranks; pass "
                          f"global_batch_size= to size the step over all ranks instead",
                          UserWarning, stacklevel=3)
        return
    if "batch_size" in loader_kwargs:
        raise LoaderError("pass batch_size (per rank) or global_batch_size (over all ranks), "
                          "not both")
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) \
            or global_batch_size < world_size:
        raise LoaderError(f"global_batch_size must be an int >= the world size "
                          f"({world_size}), got {global_batch_size!r}")
    if global_batch_size % world_size:
        logger.info("global_batch_size=%d is not a multiple of %d ranks; each rank takes %d",
                    global_batch_size, world_size, global_batch_size // world_size)
    loader_kwargs["batch_size"] = global_batch_size // world_size
