"""splitmix64 over numpy arrays: the hash behind the ``hash`` partitioner's
parts and :func:`~pyg_dist.partitioning.graph.symmetric_csr`'s thinning.
Torch-free (the out-of-core path runs without torch). The scalar form that
derives sampling seeds is :func:`pyg_dist.kernels.seeds.mix_seed`."""

from __future__ import annotations

import numpy as np

GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def splitmix64(values: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64's finalizer of ``values + seed * GOLDEN_GAMMA`` (uint64,
    wrapping), one hash per value: uniform bits, the same for a seed.

    Args:
        values: Integer ids (any shape).
        seed: The hash's seed (a non-negative int).
    """
    with np.errstate(over="ignore"):
        h = values.astype(np.uint64)
        h += np.uint64(seed) * np.uint64(GOLDEN_GAMMA)
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h
