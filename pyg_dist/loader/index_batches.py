"""A loader's batches of input positions as tensors, without a Python int per input.

``DataLoader``'s ``BatchSampler`` builds every batch as a list, one ``int``
at a time through the sampler's generator (``RandomSampler`` turns its
permutation into a list first), and PyG's ``NodeSamplerInput[index]`` turns
that list back into a tensor: at batch size 1,024 about 0.2-0.3 ms of the
consumer thread per batch, a batch's fixed cost. :func:`index_batches` cuts
the same permutation into the same batches as int64 tensors when the batch
sampler is torch's own over torch's own ``SequentialSampler`` or
``RandomSampler`` (without replacement, every input once). It draws what
they draw, in the same order and at the same moments (the ``RandomSampler``'s
seed from torch's global generator when the first batch is asked for, its
second permutation when the first runs out), so batches and every random
generator's state are what torch's classes give. Anything else (a
``DistributedSampler``, a user's sampler, ``num_samples``) gets ``None``
and is iterated as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

import torch
from torch import Tensor
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler


def index_batches(batch_sampler: Any) -> Optional[Iterator[Tensor]]:
    """``batch_sampler``'s batches as int64 tensors, or ``None`` when it is
    not one this module reproduces exactly (iterate it as it is then).

    Args:
        batch_sampler: A ``DataLoader``'s ``batch_sampler``.
    """
    if type(batch_sampler) is not BatchSampler:
        return None
    sampler = batch_sampler.sampler
    if type(sampler) is SequentialSampler:
        pieces = _sequential_pieces(len(sampler.data_source))
    elif type(sampler) is RandomSampler and sampler.replacement is False and \
            sampler._num_samples is None:
        pieces = _random_pieces(sampler)
    else:
        return None
    return _cut(pieces, batch_size=batch_sampler.batch_size, drop_last=batch_sampler.drop_last)


def _sequential_pieces(num_inputs: int) -> Iterator[Tensor]:
    yield torch.arange(num_inputs, dtype=torch.long)


def _random_pieces(sampler: RandomSampler) -> Iterator[Tensor]:
    """``RandomSampler.__iter__`` (torch 2.x, no replacement, ``num_samples``
    the dataset's size) as its permutations: the same draws in the same order."""
    n = len(sampler.data_source)
    generator = sampler.generator
    if generator is None:
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        generator = torch.Generator()
        generator.manual_seed(seed)
    yield torch.randperm(n, generator=generator)
    # torch draws a second permutation for the remainder (none), once the
    # first is used up: drawn here too, so a shared generator ends alike.
    yield torch.randperm(n, generator=generator)[:0]


def _cut(pieces: Iterator[Tensor], batch_size: int, drop_last: bool) -> Iterator[Tensor]:
    """The pieces' positions in batches of ``batch_size`` (a short last one
    unless ``drop_last``), each batch handed out once it is full, before the
    next piece is drawn (as ``BatchSampler`` pulls its sampler)."""
    held: list[Tensor] = []
    count = 0
    for piece in pieces:
        start = 0
        while start < piece.numel():
            take = min(batch_size - count, piece.numel() - start)
            held.append(piece[start:start + take])
            count += take
            start += take
            if count == batch_size:
                yield _joined(held)
                held, count = [], 0
    if count and not drop_last:
        yield _joined(held)


def _joined(held: list[Tensor]) -> Tensor:
    # A batch owns its positions (as the list it replaces did), rather than
    # a view that keeps the whole permutation alive.
    return held[0].clone() if len(held) == 1 else torch.cat(held)
