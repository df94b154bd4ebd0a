"""Deriving independent random seeds from one (a batch's, a hop's).

A batch draws one seed; every hop, part and edge type samples with its own
seed derived from it, so that the answer does not depend on which server
answers first or how requests are grouped. The trainer (per part) and the
server (per edge type of a ``sample`` request) derive them with the
same function.
"""

from __future__ import annotations

_MASK64 = 0xFFFFFFFFFFFFFFFF


def mix_seed(seed: int, salt: int) -> int:
    """splitmix64 of ``(seed, salt)``, kept below 2**63 (msgpack, int64).

    Args:
        seed: The seed to derive from (any int).
        salt: What the derived seed is for (a part, an edge type's index).
    """
    x = (int(seed) + 0x9E3779B97F4A7C15 * (salt + 1)) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) >> 1
