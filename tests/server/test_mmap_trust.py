"""The ``mmap`` stores' trust boundary (issue 31, item 8).

A mapping serves whatever its file holds: a row edited in place after the
checksum check would be served unchecked, and a truncated file kills the
server with SIGBUS, which no Python code can catch. So the stores map a part
only when no one but the file's owner may write its files and directories;
an edit before opening is a checksum mismatch, as for every store.
"""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from pyg_dist.errors import ChecksumMismatchError, PartitionFormatError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.plugins import default_registry


@pytest.fixture
def dataset(cora2_root, tmp_path):
    root = tmp_path / "cora2"
    shutil.copytree(cora2_root, root)
    return root


def _stores(root):
    reader = PartitionReader(root)
    return (default_registry.feature_store("mmap")(reader, 0),
            default_registry.graph_store("mmap")(reader, 0))


def test_private_files_are_mapped(dataset):
    fs, gs = _stores(dataset)
    assert fs.get_tensor(None, "x", None).shape[0] == gs.node_ids(None).numel()


@pytest.mark.parametrize("where, bits", [
    ("part-0/nodes.safetensors", stat.S_IWGRP),
    ("part-0/edges.safetensors", stat.S_IWOTH),
    ("part-0", stat.S_IWOTH),
    (".", stat.S_IWGRP),
], ids=["group-writable features", "world-writable topology", "world-writable part dir",
        "group-writable root"])
def test_files_others_may_write_are_not_mapped(dataset, where, bits):
    path = dataset / where
    os.chmod(path, os.stat(path).st_mode | bits)
    with pytest.raises(PartitionFormatError, match="chmod go-w") as info:
        _stores(dataset)
    assert str(path.resolve()) in str(info.value)
    # The copy the memory stores make is not at risk: they serve such a part.
    reader = PartitionReader(dataset)
    default_registry.feature_store("memory")(reader, 0)


def test_a_row_edited_in_place_before_opening_is_a_checksum_mismatch(dataset):
    path = dataset / "part-0" / "nodes.safetensors"
    with open(path, "r+b") as f:  # the same size, one byte of a row changed
        f.seek(os.path.getsize(path) - 1)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ChecksumMismatchError):
        _stores(dataset)
