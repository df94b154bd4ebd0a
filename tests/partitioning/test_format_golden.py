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
from torch_geometric.data import Data, HeteroData

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


def _hetero_graph() -> HeteroData:
    """Three node types (one without attributes), three edge types (one
    with an attribute), bfloat16, float16, uint8 and bool rows; integer
    arithmetic only."""
    data = HeteroData()
    data["paper"].x = (torch.arange(30 * 4, dtype=torch.float32).view(30, 4) / 16).bfloat16()
    data["paper"].train_mask = torch.arange(30) % 3 == 0
    data["paper"].y = torch.arange(30) % 5
    data["author"].num_nodes = 20
    data["inst"].num_nodes = 8
    data["inst"].h = (torch.arange(8 * 2, dtype=torch.float32).view(8, 2) / 4).half()
    data["inst"].code = (torch.arange(8) * 37 % 256).to(torch.uint8)
    ids = torch.arange(90)
    data["author", "writes", "paper"].edge_index = torch.stack([ids % 20, (ids * 7 + 1) % 30])
    data["author", "writes", "paper"].edge_attr = (ids % 9).view(-1, 1).float()
    data["paper", "cites", "paper"].edge_index = torch.stack([ids % 30, (ids * 11 + 5) % 30])
    data["author", "in", "inst"].edge_index = torch.stack([ids[:20], ids[:20] * 3 % 8])
    return data


# Taken from the files the in-memory writer wrote before it became the chunked
# writer's one-chunk source (commit 49018a8): the two writers are one now.
HETERO_GOLDEN = {
    "book__author.safetensors": "7412e46a2cc8860e",
    "book__inst.safetensors": "459324796de48f9b",
    "book__paper.safetensors": "3fb87c1de17d6082",
    "meta.json": "a7bba56eea34fb91",
    "part-0/edges__author__in__inst.safetensors": "8ee0caa3ba9612a5",
    "part-0/edges__author__writes__paper.safetensors": "f9a9d73c5f489188",
    "part-0/edges__paper__cites__paper.safetensors": "2eff5c7598c1c2bd",
    "part-0/nodes__author.safetensors": "bc55b8bcf282beae",
    "part-0/nodes__inst.safetensors": "092de0ee23ba6849",
    "part-0/nodes__paper.safetensors": "27f09530591f90b3",
    "part-1/edges__author__in__inst.safetensors": "c45807bd57149be4",
    "part-1/edges__author__writes__paper.safetensors": "b157b3f5c448ecd4",
    "part-1/edges__paper__cites__paper.safetensors": "a86c132d3c7d2b8d",
    "part-1/nodes__author.safetensors": "64d1a4093fde41d8",
    "part-1/nodes__inst.safetensors": "5817f714e9ac0b17",
    "part-1/nodes__paper.safetensors": "d44e577144842251",
    "part-2/edges__author__in__inst.safetensors": "7f02f704a22a3d07",
    "part-2/edges__author__writes__paper.safetensors": "7440b070a395c538",
    "part-2/edges__paper__cites__paper.safetensors": "ca68a9fd1eee387f",
    "part-2/nodes__author.safetensors": "f39a89ebacb0d1d0",
    "part-2/nodes__inst.safetensors": "5c2f361b94bdc7cc",
    "part-2/nodes__paper.safetensors": "475eb46e569943ac",
}


def test_heterogeneous_files_with_bfloat16_are_those_of_the_former_writer(tmp_path):
    root = tmp_path / "ds"
    reader = pyg_dist.partition(_hetero_graph(), 3, root, "random", graph_name="golden")
    assert reader.meta["format_version"] == 2
    assert reader.meta["node_types"][0]["features"]["x"]["dtype"] == "bfloat16"
    assert _digests(root) == HETERO_GOLDEN
