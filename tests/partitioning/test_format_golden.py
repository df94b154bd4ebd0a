"""Homogeneous datasets stay format version 1, byte for byte.

The digests below were taken from the files written by the code *before*
heterogeneous partitioning (format version 2) was added. A change that alters
one byte of a homogeneous dataset fails here: it would need a version bump.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
import torch
from torch_geometric.data import Data

import pyg_dist


def _graph() -> Data:
    # Integer arithmetic only (no RNG), so the input is the same everywhere.
    n, e = 40, 120
    ids = torch.arange(e)
    edge_index = torch.stack([ids % n, (ids * 7 + 3) % n])
    return Data(edge_index=edge_index,
                x=torch.arange(n * 3, dtype=torch.float32).view(n, 3) / 8,
                y=torch.arange(n) % 3, train_mask=torch.arange(n) % 4 == 0,
                edge_attr=torch.arange(e * 2, dtype=torch.float32).view(e, 2))


def _digests(root) -> dict[str, str]:
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        raw = path.read_bytes()
        if name == "meta.json":
            # The distribution's version is the installed package's, not the
            # format's; every other byte is compared as written.
            assert json.loads(raw)["partitioner"]["distribution"].startswith("pyg-dist ")
            raw, count = re.subn(rb'"distribution": "pyg-dist [^"]*"',
                                 b'"distribution": "pyg-dist"', raw)
            assert count == 1
        out[name] = hashlib.sha256(raw).hexdigest()[:16]
    return out


GOLDEN = {
    ("metis", 2): {"book.safetensors": "6e1e3214a7df5c58",
                   "meta.json": "e683ce396c3dd04e",
                   "part-0/edges.safetensors": "9345af283a902450",
                   "part-0/nodes.safetensors": "08d4b64967eaf8f3",
                   "part-1/edges.safetensors": "30269cefc188f863",
                   "part-1/nodes.safetensors": "bf54317349735241"},
    ("random", 3): {"book.safetensors": "aa28e1f91c1f14b5",
                    "meta.json": "94199ced115ace54",
                    "part-0/edges.safetensors": "f2dcedeefa833490",
                    "part-0/nodes.safetensors": "97ba1bc5808d33f3",
                    "part-1/edges.safetensors": "c681e27956ef91f9",
                    "part-1/nodes.safetensors": "8ffd853369ff64e3",
                    "part-2/edges.safetensors": "2f80c4139e2f72a1",
                    "part-2/nodes.safetensors": "d476805e0bc3405d"},
}


@pytest.mark.parametrize("partitioner,num_parts", sorted(GOLDEN))
def test_homogeneous_files_are_byte_identical_to_version_1(tmp_path, partitioner, num_parts):
    root = tmp_path / "ds"
    reader = pyg_dist.partition(_graph(), num_parts, root, partitioner, graph_name="golden")
    assert reader.meta["format_version"] == 1
    assert _digests(root) == GOLDEN[partitioner, num_parts]
