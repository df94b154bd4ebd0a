"""What both writers share in making a dataset directory, without torch.

Both writers (:func:`pyg_dist.partitioning.writer.partition` in memory, and
the out-of-core one from files, which must not import torch) stage
everything in a temporary directory beside ROOT and rename it onto ROOT only
when every file and ``meta.json`` are complete (:func:`staged`); on any error
the staging directory (and any parent it created) is removed. Both record
the partitioner that made the parts the same way (:func:`partitioner_record`),
and build it from the registry alike (:func:`build_partitioner`), after
checking ``num_parts`` alike (:func:`check_num_parts`).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from pyg_dist.errors import InvalidPartitionArgumentError, PartitionError
from pyg_dist.plugins import PARTITIONERS, PluginRegistry

MAX_PARTS = 1 << 15
"""The most parts a dataset may have: a book's part ids are int16 at most."""


def book_dtype_name(num_parts: int) -> str:
    """The smallest dtype holding part ids ``0 .. num_parts - 1``, by name:
    one rule for torch books and the torch-free writer's numpy ones
    (:class:`~pyg_dist.errors.InvalidPartitionArgumentError` beyond
    :data:`MAX_PARTS`)."""
    if num_parts <= 256:
        return "uint8"
    if num_parts <= MAX_PARTS:
        return "int16"
    raise InvalidPartitionArgumentError(
        f"num_parts={num_parts} exceeds the supported maximum of {MAX_PARTS}")


def check_num_parts(num_parts: Any, num_nodes: int) -> None:
    """Refuses a ``num_parts`` that is not an int in ``[1, min(num_nodes,
    MAX_PARTS)]`` (:class:`~pyg_dist.errors.InvalidPartitionArgumentError`)."""
    if isinstance(num_parts, bool) or not isinstance(num_parts, int):
        raise InvalidPartitionArgumentError(f"num_parts must be an int, got {num_parts!r}")
    if num_parts < 1 or num_parts > num_nodes:
        raise InvalidPartitionArgumentError(
            f"num_parts must lie in [1, {num_nodes}] (the number of nodes); got {num_parts}")
    if num_parts > MAX_PARTS:
        raise InvalidPartitionArgumentError(
            f"num_parts={num_parts} exceeds the supported maximum of {MAX_PARTS}")


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
def staged(root: Path, token: Optional[str] = None) -> Iterator[Path]:
    """Yields a fresh staging directory that becomes ``root`` when the block
    ends without error, and is removed otherwise.

    Args:
        root: The dataset directory to create.
        token: Names the staging directory (``.ROOT.tmp-TOKEN``; default a
            random one), so that the other ranks of a cross-host run can
            find it.

    Raises:
        InvalidPartitionArgumentError: the staging directory cannot be made.
        PartitionError: the system refused a write; nothing is left behind.
    """
    tmp = staging_dir(root, token or uuid.uuid4().hex[:8])
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


def staging_dir(root: Path, token: str) -> Path:
    """The staging directory :func:`staged` makes for ``token``."""
    return root.parent / f".{root.name}.tmp-{token}"


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


def partitioner_record(registry: PluginRegistry, name: str, plugin: Any) -> dict[str, Any]:
    """What ``meta.json`` records of the partitioner that made the parts.

    Raises:
        InvalidPartitionArgumentError: if the plugin's ``options()`` are not
            JSON-serialisable.
    """
    try:
        options = json.loads(json.dumps(plugin.options()))
    except (TypeError, ValueError) as exc:
        raise InvalidPartitionArgumentError(
            f"the partitioner's options() must be JSON-serialisable: {exc}") from exc
    found = [f for f in registry.found(PARTITIONERS) if f.name == name]
    distribution = f"{found[0].distribution} {found[0].version}" if found else None
    return {"name": name, "options": options, "distribution": distribution}


def build_partitioner(registry: PluginRegistry, name: str, options: dict[str, Any],
                      methods: tuple[str, ...] = ("assign",)) -> Any:
    """The partitioner plugin ``name`` built with the user's options.

    Args:
        registry: Where the plugin is found.
        name: Its name in ``pyg_dist.partitioners``.
        options: Keyword arguments of its constructor.
        methods: The writer needs at least one of these (``assign``, or
            ``assign_stream`` from files).

    Raises:
        InvalidPartitionArgumentError: if it rejects the options or has none
            of ``methods``.
    """
    cls = registry.get(PARTITIONERS, name)
    try:
        plugin = cls(**options)
    except TypeError as exc:
        raise InvalidPartitionArgumentError(
            f"partitioner {name!r} rejected the options {sorted(options)}: {exc}") from exc
    if not any(callable(getattr(plugin, m, None)) for m in methods):
        wanted = " nor ".join(f"{m}(..., num_parts)" for m in methods)
        raise InvalidPartitionArgumentError(
            f"partitioner plugin {name!r} has no {wanted} method")
    return plugin
