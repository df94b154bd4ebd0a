"""Reduced-precision features: node feature matrices stored and served in
``float16`` or ``bfloat16``.

Half the bytes per row on disk, in the servers' memory, on the wire and over
PCIe; the model casts on the GPU (``batch.x.float()``), as SALIENT trains
papers100M in fp16. Only floating-point node attributes with two or more
dimensions (feature matrices such as ``x``) are cast: labels, masks, times
and 1-D float targets keep their dtype, and edge attributes are left alone.
"""

from __future__ import annotations

import copy
from typing import Any, Optional, Union

import torch

from pyg_dist.errors import InvalidPartitionArgumentError

FEATURE_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
"""The reduced precisions a partition can store its features in, by name."""


def feature_dtype_of(value: Union[None, str, torch.dtype]) -> Optional[torch.dtype]:
    """``value`` (a name of :data:`FEATURE_DTYPES` or one of its dtypes)
    as a torch dtype; ``None`` keeps the features as they are.

    Raises:
        InvalidPartitionArgumentError: for any other value.
    """
    if value is None or value in FEATURE_DTYPES.values():
        return value  # type: ignore[return-value]
    if isinstance(value, str) and value in FEATURE_DTYPES:
        return FEATURE_DTYPES[value]
    raise InvalidPartitionArgumentError(
        f"feature_dtype must be one of {sorted(FEATURE_DTYPES)} (or None to keep the "
        f"features' own dtype), got {value!r}")


def with_feature_dtype(data: Any, dtype: Optional[torch.dtype]) -> Any:
    """A shallow copy of ``data`` (``Data`` or ``HeteroData``) whose node
    feature matrices are cast to ``dtype``; ``data`` itself if ``dtype`` is
    ``None``. The caller's graph is not modified."""
    if dtype is None:
        return data
    data = copy.copy(data)
    for store in data.node_stores:
        for key, value in list(store.items()):
            if isinstance(value, torch.Tensor) and value.is_floating_point() \
                    and value.dim() >= 2 and store.is_node_attr(key):
                store[key] = value.to(dtype)
    return data
