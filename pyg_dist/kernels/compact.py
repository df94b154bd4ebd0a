"""Compacting a boolean mask: the positions, or the values, where it holds.

``Tensor.nonzero`` and boolean-mask indexing run one element at a time on
one CPU thread: 0.7-0.9 ms for 150k elements, while numpy's
``flatnonzero`` / ``compress`` count and copy with SIMD in 0.08-0.14 ms.
The trainer compacts masks of that size several times per batch (routing
ids to their servers, finding new nodes while relabelling), so CPU tensors
go through numpy (no copy either way); others stay with torch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def _numpy_ok(*tensors: Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dim() == 1 and t.is_contiguous()
               and not t.requires_grad for t in tensors)


def nonzero_1d(mask: Tensor) -> Tensor:
    """The int64 positions where the 1-D bool ``mask`` is true, ascending
    (``mask.nonzero().view(-1)``)."""
    if mask.dtype == torch.bool and _numpy_ok(mask):
        return torch.from_numpy(np.flatnonzero(mask.numpy()).astype(np.int64, copy=False))
    return mask.nonzero().view(-1)


def masked_1d(values: Tensor, mask: Tensor) -> Tensor:
    """The entries of 1-D ``values`` where the 1-D bool ``mask`` is true, in
    order (``values[mask]``)."""
    if mask.dtype == torch.bool and values.dtype != torch.bfloat16 and \
            _numpy_ok(values, mask) and values.numel() == mask.numel():
        return torch.from_numpy(np.compress(mask.numpy(), values.numpy()))
    return values[mask]
