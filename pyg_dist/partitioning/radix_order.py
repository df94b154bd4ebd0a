"""Stable sort orders of bounded integer keys, by 16-bit radix passes.

numpy's stable ``argsort`` is a radix sort for keys of 16 bits or fewer and a
timsort otherwise: on 2 M int64 keys below 140k (a part's destination rows)
the timsort takes about 280 ms, two radix passes over 16-bit digits about
25 ms. The CSC pass sorts every edge by its destination's row this way
(:mod:`~pyg_dist.partitioning.edge_shuffle`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

_DIGIT_BITS = 16
_DIGIT_MASK = (1 << _DIGIT_BITS) - 1


def stable_order(keys: np.ndarray, bound: int, order: Optional[np.ndarray] = None
                 ) -> np.ndarray:
    """The indices that sort ``keys`` stably, as ``np.argsort(keys,
    kind="stable")`` gives them.

    Args:
        keys: Non-negative integers below ``bound`` (1-D).
        bound: An upper bound of the keys: the number of 16-bit passes.
        order: An order the result refines: equal keys stay in this order
            (a least significant key sorted first); ``None``: their index
            order.

    Returns:
        int64 indices into ``keys``.
    """
    passes = max(1, -(-max(int(bound) - 1, 1).bit_length() // _DIGIT_BITS))
    for p in range(passes):
        current = keys if order is None else keys[order]
        digit = (current >> (p * _DIGIT_BITS)) if p else current
        step = np.argsort((digit & _DIGIT_MASK).astype(np.uint16), kind="stable")
        del current, digit
        order = step if order is None else order[step]
    return order.astype(np.int64, copy=False)
