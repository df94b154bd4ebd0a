"""The tensor dtypes pyg-dist stores in partition files and sends on the wire:
the subset of torch's a graph needs, one table for both (a dtype a file may
hold can always be served)."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in (
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64")}
"""Name (``str(dtype)`` without ``torch.``, as ``meta.json`` and the wire
write it) -> dtype; nothing else is read or sent."""
