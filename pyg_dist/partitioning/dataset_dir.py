"""Creating a dataset directory atomically, without torch.

Both writers (:func:`pyg_dist.partitioning.writer.partition` in memory, and
the out-of-core one from files, which must not import torch) stage everything
in a temporary directory beside ROOT and rename it onto ROOT only when every
file and ``meta.json`` are complete; on any error the staging directory (and
any parent it created) is removed.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from pyg_dist.errors import InvalidPartitionArgumentError, PartitionError


def check_root(root: Path, overwrite: bool) -> None:
    """Refuses a ROOT that is a file or a non-empty directory (unless
    ``overwrite``).

    Raises:
        InvalidPartitionArgumentError: naming what to do instead.
    """
    if "\0" in str(root):
        raise InvalidPartitionArgumentError("the dataset directory's name holds a NUL byte")
    if root.exists() and not root.is_dir():
        raise InvalidPartitionArgumentError(f"{root} exists and is not a directory")
    if root.is_dir() and any(root.iterdir()) and not overwrite:
        raise InvalidPartitionArgumentError(
            f"{root} exists and is not empty; choose another directory or pass "
            f"overwrite=True (--overwrite) to replace it")


@contextmanager
def staged(root: Path) -> Iterator[Path]:
    """Yields a fresh staging directory that becomes ``root`` when the block
    ends without error, and is removed otherwise.

    Raises:
        InvalidPartitionArgumentError: the staging directory cannot be made.
        PartitionError: the system refused a write; nothing is left behind.
    """
    tmp = root.parent / f".{root.name}.tmp-{uuid.uuid4().hex[:8]}"
    created = _first_missing(root.parent)
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise InvalidPartitionArgumentError(
            f"cannot create the dataset directory {root}: {exc.strerror or exc}; choose a "
            f"directory you can write") from exc
    try:
        yield tmp
        _replace(tmp, root)
    except OSError as exc:
        if tmp.exists():
            shutil.rmtree(created or tmp, ignore_errors=True)
        raise PartitionError(f"writing the dataset {root} failed: {exc.strerror or exc}; "
                             f"nothing was left behind. Free space or choose another "
                             f"directory") from exc
    except BaseException:
        if tmp.exists():
            shutil.rmtree(created or tmp, ignore_errors=True)
        raise


def _first_missing(path: Path) -> Optional[Path]:
    """The outermost ancestor of ``path`` (or itself) that does not exist yet."""
    missing = None
    for candidate in [path, *path.parents]:
        if candidate.exists():
            break
        missing = candidate
    return missing


def _replace(tmp: Path, root: Path) -> None:
    """Moves the finished dataset onto ``root``; an old one is removed only
    after the new one is in place."""
    old = None
    if root.exists():
        old = root.parent / f".{root.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(root, old)
    try:
        os.replace(tmp, root)
    except BaseException:
        if old is not None:
            os.replace(old, root)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
