"""Writing gathered rows to given positions of an output: ``out[positions] = source[rows]``.

A partition server that writes its rows straight into the trainer's batch
(:mod:`pyg_dist.rpc.shm.outputs`) scatters where it used to gather into a
reply of its own. torch's scatters (``index_copy_``, ``index_put_``) move
one element at a time: for 40k rows of 128 float32 about 6 ms against
1.7 ms for the ``index_select`` gather, whose dim-0 path copies whole rows.
numpy's fancy assignment copies whole rows too, so rows are gathered with
``index_select`` into a small buffer that stays in cache and assigned from
there with numpy, each row one opaque ``void`` item of its bytes (any dtype,
bits unchanged). One item a row, not a ``[rows, row_bytes]`` uint8 array:
numpy then copies each row as one block instead of stepping through its
bytes, 3.4x faster for 36k rows of 100 float32 (5.25 -> 1.55 ms, one core).
"""

from __future__ import annotations

import threading
from typing import Optional

import numpy as np
import torch
from torch import Tensor

CHUNK_BYTES = 512 << 10
"""Bytes of rows gathered at a time: within L2, and few enough Python steps
for narrow attributes (a label or a mask goes in one)."""


_local = threading.local()


def _scratch(nbytes: int) -> Tensor:
    """This thread's gather buffer, at least ``nbytes`` long (uint8, kept
    between calls: a fresh one costs its page faults on every call, about a
    quarter of a 36k-row placement)."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None or buffer.numel() < nbytes:
        # Rounded to 16 bytes: viewed as any dtype from its start.
        buffer = _local.buffer = torch.empty(max(nbytes, CHUNK_BYTES) + 15 & ~15,
                                             dtype=torch.uint8)
    return buffer[:nbytes]


def _rows_of(t: Tensor) -> np.ndarray:
    """A contiguous tensor as a 1-D numpy array of one ``void`` item (its
    bytes) per row, without a copy."""
    raw = t.reshape(t.size(0), -1).view(torch.uint8).numpy()
    return raw.view(np.dtype((np.void, raw.shape[1]))).reshape(-1)


def place_rows(out: Tensor, positions: Tensor, source: Tensor,
               rows: Optional[Tensor] = None) -> None:
    """``out[positions] = source[rows]`` (``source`` when ``rows`` is ``None``),
    whole rows at a time.

    Args:
        out: Contiguous destination ``[N, ...]``.
        positions: int64 rows of ``out``, checked by the caller to lie in
            ``[0, N)``; a repeated position is written more than once.
        source: Rows to read, same dtype and row shape as ``out``.
        rows: int64 rows of ``source`` to read, one per position (checked by
            the caller); ``None``: ``source`` has one row per position.
    """
    count = positions.numel()
    if count == 0 or out[0].numel() == 0:
        return
    if not out.is_contiguous() or out.dtype != source.dtype:
        raise ValueError("place_rows needs a contiguous output of the source's dtype")
    target = _rows_of(out)
    where = positions.numpy()
    if rows is None:
        target[where] = _rows_of(source.contiguous())
        return
    if not source.is_contiguous():
        target[where] = _rows_of(source.index_select(0, rows))
        return
    row_bytes = out[0].numel() * out.element_size()
    step = max(1, CHUNK_BYTES // row_bytes)
    buffer = _scratch(min(count, step) * row_bytes).view(out.dtype).view(-1, *out.shape[1:])
    flat = _rows_of(buffer)
    for start in range(0, count, step):
        stop = min(start + step, count)
        torch.index_select(source, 0, rows[start:stop], out=buffer[:stop - start])
        target[where[start:stop]] = flat[:stop - start]
