"""Multi-constraint METIS through the C API that pymetis's extension exports.

pymetis (2025.2) hard-codes ``ncon = 1`` in its ``part_graph`` wrapper, so
interleaved multi-constraint vertex weights are silently read as one
constraint. Its extension module is statically linked against METIS and
exports ``METIS_PartGraphKway`` / ``METIS_PartGraphRecursive``; we call
those with ctypes, passing numpy buffers without copies. Single-constraint
partitioning keeps using pymetis's public API.
"""

from __future__ import annotations

import ctypes
from typing import Optional

import numpy as np

from pyg_dist.errors import InvalidPartitionArgumentError

METIS_OK = 1


def _library() -> ctypes.CDLL:
    import pymetis._internal as internal

    lib = ctypes.CDLL(internal.__file__)
    if internal._idx_type_width() != 64:
        raise InvalidPartitionArgumentError(
            "metis: multi-constraint balancing needs a pymetis built with 64-bit idx_t")
    return lib


def part_graph_multi(num_parts: int, xadj: np.ndarray, adjncy: np.ndarray,
                     vweights: np.ndarray, ncon: int, *, seed: int,
                     ufactor: Optional[int], recursive: bool) -> np.ndarray:
    """Runs METIS with ``ncon`` balance constraints.

    Args:
        num_parts: Number of parts (>= 2).
        xadj: int64 ``[n + 1]`` CSR pointer of the symmetric graph.
        adjncy: int64 neighbours.
        vweights: int64 ``[n * ncon]`` interleaved vertex weights
            (node ``v``'s constraint ``c`` at ``v * ncon + c``).
        ncon: Number of constraints.
        seed: METIS's random seed.
        ufactor: Allowed imbalance in 1/1000 (``None``: METIS's default).
        recursive: Recursive bisection instead of k-way.

    Returns:
        int64 part id per node.
    """
    import pymetis._internal as internal

    lib = _library()
    n = xadj.shape[0] - 1
    arrays = [np.ascontiguousarray(a, dtype=np.int64) for a in (xadj, adjncy, vweights)]
    xadj, adjncy, vweights = arrays
    options = np.zeros(internal.Options._len(), dtype=np.int64)
    lib.METIS_SetDefaultOptions(options.ctypes.data_as(ctypes.c_void_p))
    options[internal.options_indices.SEED] = seed
    if ufactor is not None:
        options[internal.options_indices.UFACTOR] = ufactor
    part = np.empty(n, dtype=np.int64)
    edgecut = ctypes.c_int64()
    nvtxs, ncon_c, nparts = ctypes.c_int64(n), ctypes.c_int64(ncon), ctypes.c_int64(num_parts)
    func = lib.METIS_PartGraphRecursive if recursive else lib.METIS_PartGraphKway

    def ptr(a: np.ndarray) -> ctypes.c_void_p:
        return a.ctypes.data_as(ctypes.c_void_p)

    status = func(ctypes.byref(nvtxs), ctypes.byref(ncon_c), ptr(xadj), ptr(adjncy),
                  ptr(vweights), None, None, ctypes.byref(nparts), None, None,
                  ptr(options), ctypes.byref(edgecut), ptr(part))
    if status != METIS_OK:
        raise InvalidPartitionArgumentError(
            f"METIS failed with status {status} on a {ncon}-constraint problem; try "
            f"fewer constraints or a larger ufactor")
    return part
