"""Writing a safetensors file piece by piece, without holding its tensors.

The out-of-core writer knows every tensor's dtype and shape before it has
their contents (counts come first), so it lays the file out at once (header,
then each tensor's byte range) and fills the ranges with ``os.pwrite`` as
chunks arrive, in any order. The bytes are exactly those
``safetensors.numpy.save_file`` would write for the same tensors: the tensor
order is the one the installed safetensors library chooses (learned once from
a tiny probe file), the header is its compact JSON padded with spaces to a
multiple of 8 (``tests/partitioning/test_safetensors_stream.py`` compares
them byte for byte).
"""

from __future__ import annotations

import json
import os
import struct
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

# numpy dtype -> safetensors header name (the partition format's whitelist,
# less bfloat16, which numpy lacks): what input files may hold.
NUMPY_DTYPES = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8",
    np.dtype(np.int16): "I16", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64",
    np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
}
BFLOAT16 = np.dtype([("bfloat16", "<u2")])
"""The numpy stand-in of torch's bfloat16 (its raw 16 bits): how an in-memory
graph's bfloat16 rows reach a :class:`SafetensorsFile`."""
HEADER_DTYPES = {**NUMPY_DTYPES, BFLOAT16: "BF16"}
"""numpy dtype -> safetensors header name of everything the writer writes."""

TensorSpec = tuple[np.dtype, tuple[int, ...]]


@cache
def _dtype_rank(with_bfloat16: bool) -> dict[str, int]:
    """Position of every safetensors dtype name in the library's tensor order
    (ties within a dtype are broken by name), learned from a probe file of
    one-element tensors: numpy ones, or torch ones where bfloat16 is asked
    for (only an in-memory graph has it, and torch is loaded then)."""
    probe = {name: np.zeros(1, dtype=dtype) for dtype, name in NUMPY_DTYPES.items()}
    if with_bfloat16:
        import torch
        from safetensors.torch import save as save_torch

        blob = save_torch({**{k: torch.from_numpy(v) for k, v in probe.items()},
                           "BF16": torch.zeros(1, dtype=torch.bfloat16)})
    else:
        from safetensors.numpy import save

        blob = save(probe)
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + size])
    order = sorted((v["data_offsets"][0], k) for k, v in header.items())
    return {name: rank for rank, (_, name) in enumerate(order)}


def tensor_order(specs: dict[str, TensorSpec]) -> list[str]:
    """The names of ``specs`` in the order safetensors lays them out."""
    # The probe ranks dtypes only; within one dtype safetensors sorts by name.
    by_dtype: dict[str, list[str]] = {}
    for name in specs:
        by_dtype.setdefault(HEADER_DTYPES[np.dtype(specs[name][0])], []).append(name)
    rank = _dtype_rank("BF16" in by_dtype)
    return [n for d in sorted(by_dtype, key=lambda d: rank[d]) for n in sorted(by_dtype[d])]


class SafetensorsFile:
    """A safetensors file laid out from specs, then filled in any order.

    Args:
        path: The file to create (truncated if it exists).
        specs: ``{name: (numpy dtype, shape)}`` of every tensor.

    Every byte of every tensor must be written (:meth:`write_rows`) before
    :meth:`close`; the file is created at its final size up front.
    """

    def __init__(self, path: Path, specs: dict[str, TensorSpec]) -> None:
        self.path = path
        self._specs = {k: (np.dtype(d), tuple(int(s) for s in shape))
                       for k, (d, shape) in specs.items()}
        header: dict[str, Any] = {}
        self._begin: dict[str, int] = {}
        offset = 0
        for name in tensor_order(self._specs):
            dtype, shape = self._specs[name]
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            header[name] = {"dtype": HEADER_DTYPES[dtype], "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes]}
            self._begin[name] = offset
            offset += nbytes
        raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        raw += b" " * (-len(raw) % 8)
        self._data_start = 8 + len(raw)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _pwrite_all(self._fd, struct.pack("<Q", len(raw)) + raw, 0)
            os.ftruncate(self._fd, self._data_start + offset)
        except BaseException:
            os.close(self._fd)
            raise

    def write_rows(self, name: str, first_row: int, rows: np.ndarray) -> None:
        """Writes ``rows`` (same dtype and row shape as the tensor) at row
        ``first_row`` of tensor ``name``."""
        dtype, shape = self._specs[name]
        rows = np.ascontiguousarray(rows, dtype=dtype)
        row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        if rows.shape[1:] != shape[1:] or first_row + len(rows) > shape[0]:
            raise ValueError(f"{self.path}: rows {first_row}+{len(rows)} of shape "
                             f"{rows.shape} do not fit tensor {name!r} of shape {shape}")
        _pwrite_all(self._fd, rows.view(np.uint8).reshape(-1),
                    self._data_start + self._begin[name] + first_row * row_bytes)

    def close(self) -> None:
        """Closes the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view.nbytes:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
