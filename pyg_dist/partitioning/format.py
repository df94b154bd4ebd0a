"""The on-disk partition format: names, checksums and safetensors I/O.

A partitioned homogeneous graph (format version 1) is a directory::

    ROOT/meta.json                 format version, types, counts, partitioner,
                                   per-part statistics, sha256 of every file
    ROOT/book.safetensors          node_part: the owner of every global node id
    ROOT/part-K/nodes.safetensors  node_ids (sorted global ids) + node features
    ROOT/part-K/edges.safetensors  CSC of the owned nodes' incoming edges:
                                   indptr, indices (global src ids), edge_ids
                                   (global), + edge features

A heterogeneous one (version 2) has the same files once per type, named by
:mod:`~pyg_dist.partitioning.file_names` (``book__paper.safetensors``,
``part-K/nodes__paper.safetensors``,
``part-K/edges__author__writes__paper.safetensors``); ids are per type.

Every tensor is stored with safetensors: the loader parses a JSON header and
copies (or memory-maps) raw bytes; nothing can execute code on load. The full
description lives in ``docs/partition-format.md``.

Node and edge *types* are carried from the first version on: ``meta.json``
lists ``node_types`` and ``edge_types`` (``null`` for a homogeneous graph, a
name / a ``[src, rel, dst]`` triple for a heterogeneous one) and every file is
listed per type, so a reader never guesses a file name.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import struct
from pathlib import Path, PurePosixPath
from typing import Any, Optional, Union

import torch

from pyg_dist.dtypes import DTYPES
from pyg_dist.errors import PartitionFormatError
from pyg_dist.partitioning.file_names import (  # noqa: F401  (re-exported)
    EDGE_IDS,
    FORMAT_NAME,
    FORMAT_VERSION,
    FORMAT_VERSIONS,
    HETERO_FORMAT_VERSION,
    INDICES,
    INDPTR,
    META_FILE,
    NODE_IDS,
    RESERVED_EDGE_NAMES,
    RESERVED_NODE_NAMES,
    edge_ends,
    sha256_file,
    type_name_problem,
)

NodeTypeKey = Optional[str]
EdgeTypeKey = Optional[tuple[str, str, str]]

# safetensors header name -> torch dtype, for every dtype of pyg_dist.dtypes.
_DTYPES = {header: DTYPES[name] for name, header in (
    ("bool", "BOOL"), ("uint8", "U8"), ("int8", "I8"), ("int16", "I16"), ("int32", "I32"),
    ("int64", "I64"), ("float16", "F16"), ("bfloat16", "BF16"), ("float32", "F32"),
    ("float64", "F64"))}
SAFETENSORS_DTYPES = {dtype: name for name, dtype in _DTYPES.items()}
"""torch dtype -> its safetensors header name, e.g. ``torch.float32 -> "F32"``."""
TORCH_DTYPES = DTYPES
"""``meta.json`` dtype name -> torch dtype, e.g. ``"float32" -> torch.float32``."""

MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_HEADER_TENSORS = 4096
MAX_TENSOR_NDIM = 8



def type_from_json(value: Any) -> Union[NodeTypeKey, EdgeTypeKey]:
    """A node/edge type as ``meta.json`` stores it (a list, or a string or
    ``null``) as pyg-dist keys it (a tuple, or the string or ``None``)."""
    return tuple(value) if isinstance(value, list) else value


def dtype_name(dtype: torch.dtype) -> str:
    """The torch dtype's short name as written in ``meta.json``, e.g. ``float32``."""
    return str(dtype).removeprefix("torch.")


def safe_path(root: Path, name: str) -> Path:
    """Joins a file name from ``meta.json`` to ROOT, refusing escapes.

    Raises:
        PartitionFormatError: if ``name`` is absolute, contains ``..``, a
            backslash or a NUL, is empty or longer than 1024 characters: a
            crafted ``meta.json`` must not make the reader open files outside
            ROOT.
    """
    if not isinstance(name, str) or not 0 < len(name) <= 1024 or "\0" in name:
        raise PartitionFormatError(
            "meta.json names a file by an empty, overlong or non-string value; the "
            "dataset is corrupt or crafted")
    pure = PurePosixPath(name)
    if ("\\" in name or pure.is_absolute()
            or any(p in ("..", "") for p in pure.parts) or name.startswith("/")):
        raise PartitionFormatError(
            f"meta.json names the file {name!r}, which is not a relative path "
            f"inside the dataset directory; the dataset is corrupt or crafted")
    return root.joinpath(*pure.parts)



def save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Writes tensors to a safetensors file (contiguous CPU copies if needed)."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(path))


def checked_file(root: Path, name: str) -> Path:
    """The path of a file named in ``meta.json``, checked on disk.

    Every component below ``root`` must be a real directory or, at the end,
    a regular file: a symbolic link anywhere inside the dataset is refused,
    so is a path that resolves outside ``root``. (``root`` itself may be a
    link: the user chose it.)

    Raises:
        PartitionFormatError: if the name escapes, a component is a link,
            or the file is missing or not a regular file.
    """
    path = safe_path(root, name)
    current = root
    parts = PurePosixPath(name).parts
    for i, part in enumerate(parts):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError as exc:
            raise PartitionFormatError(f"{path} is missing; the dataset is incomplete, "
                                       f"partition it again") from exc
        except OSError as exc:
            raise PartitionFormatError(f"cannot read {path}: {exc.strerror}") from exc
        if stat.S_ISLNK(mode):
            raise PartitionFormatError(
                f"{current} is a symbolic link; links inside a dataset are refused (they "
                f"could point outside it): copy the real file into the dataset")
        last = i == len(parts) - 1
        if (last and not stat.S_ISREG(mode)) or (not last and not stat.S_ISDIR(mode)):
            raise PartitionFormatError(f"{current} is not a regular "
                                       f"{'file' if last else 'directory'}")
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
        raise PartitionFormatError(f"{path} resolves outside the dataset directory {root}")
    return path


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """Parses and checks a safetensors header; returns it and the offset of the data.

    The header must be a JSON object of at most :data:`MAX_HEADER_TENSORS`
    tensors, each with a known dtype, a shape of non-negative sizes and data
    offsets that span exactly its bytes inside the file.

    Raises:
        PartitionFormatError: if the file is too short, a link, or its header
            is not valid JSON or breaks those rules.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            raw = f.read(8)
            if len(raw) != 8:
                raise PartitionFormatError(f"{path} is not a safetensors file (too short)")
            (size,) = struct.unpack("<Q", raw)
            if size > min(MAX_HEADER_BYTES, file_size - 8):
                raise PartitionFormatError(f"{path} has an implausible header size {size}")
            header = json.loads(f.read(size))
    except RecursionError as exc:
        raise PartitionFormatError(f"{path}: the safetensors header nests too deep") from exc
    except (OSError, ValueError) as exc:
        raise PartitionFormatError(f"cannot read safetensors header of {path}: "
                                   f"{str(exc)[:200]}") from exc
    if not isinstance(header, dict) or len(header) > MAX_HEADER_TENSORS + 1:
        raise PartitionFormatError(f"{path}: safetensors header is not a JSON object of at "
                                   f"most {MAX_HEADER_TENSORS} tensors")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(v, str) for v in metadata.values())):
        raise PartitionFormatError(f"{path}: __metadata__ must map strings to strings")
    for name, info in header.items():
        _check_entry(path, name, info, file_size - 8 - size)
    return header, 8 + size


def _check_entry(path: Path, name: str, info: Any, data_size: int) -> None:
    """One tensor of a safetensors header: dtype, shape and offsets."""
    def bad(what: str) -> PartitionFormatError:
        shown = name if len(name) <= 256 else f"{name[:64]}..."
        return PartitionFormatError(f"{path}: tensor {shown!r} has {what}; the file is "
                                    f"damaged or crafted: partition the dataset again")

    if not isinstance(info, dict):
        raise bad("no header object")
    dtype = _DTYPES.get(info.get("dtype")) if isinstance(info.get("dtype"), str) else None
    if dtype is None:
        raise bad(f"a dtype outside {sorted(_DTYPES)}")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list) or len(shape) > MAX_TENSOR_NDIM or not all(
            isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 1 << 62
            for s in shape):
        raise bad("an invalid shape")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(
            isinstance(o, int) and not isinstance(o, bool) for o in offsets):
        raise bad("invalid data offsets")
    begin, end = offsets
    itemsize = dtype.itemsize
    if not 0 <= begin <= end <= data_size or end - begin != _numel(shape) * itemsize:
        raise bad("data offsets that do not match its shape or lie outside the file")


def load_tensors(path: Path, names: Optional[list[str]] = None, *,
                 mmap_: bool = False) -> dict[str, torch.Tensor]:
    """Loads tensors from a safetensors file, copied into RAM or memory-mapped.

    Args:
        path: The file.
        names: Load only these names (``None``: all).
        mmap_: Map the file privately (copy-on-write) and return tensors that
            view the mapping: pages are read on first touch and shared with the
            page cache, so a server over a large part starts at once.

    Raises:
        PartitionFormatError: if the file is missing, malformed, or lacks a name.
    """
    if not path.is_file():
        raise PartitionFormatError(f"partition file {path} is missing; partition again")
    header, start = read_header(path)
    wanted = list(header) if names is None else names
    missing = [n for n in wanted if n not in header]
    if missing:
        raise PartitionFormatError(f"{path} lacks tensors {missing}; has {sorted(header)}")
    if not mmap_:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                return {n: f.get_tensor(n) for n in wanted}
        except SafetensorError as exc:
            raise PartitionFormatError(f"cannot read {path}: {exc}") from exc
    return _mmap_tensors(path, header, start, wanted)


def _mmap_tensors(path: Path, header: dict[str, Any], start: int,
                  names: list[str]) -> dict[str, torch.Tensor]:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        # ACCESS_COPY: writable for torch.frombuffer, but writes never reach
        # the file and pages stay shared until written.
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
    if mapped is not None:
        # The stores read rows and neighbour lists at random. By default a
        # page fault reads the device's whole read-ahead window around it
        # (read_ahead_kb: 128 KiB to 8 MiB), so on a part bigger than memory
        # every row read fetched megabytes and evicted the rows other
        # requests were about to use: a server stalled for minutes on one
        # batch. MADV_RANDOM reads just the page that faulted.
        mapped.madvise(mmap.MADV_RANDOM)
    out = {}
    for name in names:
        info = header[name]  # checked by read_header
        dtype = _DTYPES[info["dtype"]]
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        itemsize = dtype.itemsize
        count = (end - begin) // itemsize
        if start + end > size or count != _numel(shape):
            raise PartitionFormatError(f"{path}: tensor {name!r} has inconsistent offsets")
        if count == 0 or mapped is None:
            out[name] = torch.empty(shape, dtype=dtype)
        elif (start + begin) % itemsize:
            # Unaligned data cannot be viewed; copy this one tensor.
            raw = torch.frombuffer(mapped, dtype=torch.uint8, count=end - begin,
                                   offset=start + begin)
            out[name] = raw.clone().view(dtype).view(shape)
        else:
            out[name] = torch.frombuffer(mapped, dtype=dtype, count=count,
                                         offset=start + begin).view(shape)
    return out


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


