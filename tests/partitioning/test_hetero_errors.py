"""Heterogeneous graphs, bad input: type names that cannot name files (from
the user and from meta.json), the homogeneous API on a heterogeneous dataset
and the reverse, unknown types."""

from __future__ import annotations

import json

import pytest
import torch
from torch_geometric.data import HeteroData

import pyg_dist
from pyg_dist.errors import (
    GraphKindMismatchError,
    InvalidPartitionArgumentError,
    PartitionFormatError,
    UnknownTypeError,
)
from pyg_dist.partitioning import PartitionReader

BAD_NAMES = ["a/b", "a\\b", "..", "x..y", "a__b", "", "_a", "b_", ".", "a\0b", "t\nx",
             "x" * 65]


def _graph(node_type: str = "paper", rel: str = "cites") -> HeteroData:
    data = HeteroData()
    data[node_type].x = torch.arange(12, dtype=torch.float32).view(6, 2)
    data["author"].num_nodes = 4
    data["author", rel, node_type].edge_index = torch.tensor([[0, 1, 3], [5, 0, 2]])
    return data


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("where", ["node type", "relation"])
def test_type_names_that_cannot_name_files_are_refused(tmp_path, name, where):
    data = _graph(node_type=name) if where == "node type" else _graph(rel=name)
    with pytest.raises(InvalidPartitionArgumentError, match="type names become file names"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")
    assert list(tmp_path.iterdir()) == []


def test_good_names_with_dots_dashes_and_single_underscores_are_kept(tmp_path):
    reader = pyg_dist.partition(_graph(node_type="paper.v2-x_y", rel="cited_by"), 2,
                                tmp_path / "ds", "random")
    assert "part-0/edges__author__cited_by__paper.v2-x_y.safetensors" in reader.meta["files"]


def test_node_types_that_differ_only_in_case_are_refused(tmp_path):
    data = _graph()
    data["Paper"].num_nodes = 2
    with pytest.raises(InvalidPartitionArgumentError, match="differ only in case"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")


def test_edge_ids_out_of_range_of_their_node_type_are_refused(tmp_path):
    data = _graph()
    data["author", "cites", "paper"].edge_index = torch.tensor([[4], [0]])  # 4 authors
    with pytest.raises(InvalidPartitionArgumentError, match="source ids outside"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")


def test_a_reserved_attribute_name_is_refused(tmp_path):
    data = _graph()
    data["paper"].node_ids = torch.zeros(6)
    with pytest.raises(InvalidPartitionArgumentError, match="reserved"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")


@pytest.fixture
def hetero_root(tmp_path, hetero_graph):
    root = tmp_path / "hetero"
    pyg_dist.partition(hetero_graph, 2, root, "random")
    return root


@pytest.fixture
def homo_root(tmp_path, fake_graph):
    root = tmp_path / "homo"
    pyg_dist.partition(fake_graph, 2, root, "random")
    return root


@pytest.mark.parametrize("name", ["../x", "a__b", "a/b", ""])
def test_a_bad_type_name_in_meta_json_is_refused_on_open(hetero_root, name):
    meta = json.loads((hetero_root / "meta.json").read_text())
    meta["node_types"][2]["type"] = name
    (hetero_root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match=r"node_types\[2\]\.type"):
        PartitionReader(hetero_root)


def test_version_and_kind_must_agree(hetero_root, homo_root):
    for root, version in ((hetero_root, 1), (homo_root, 2)):
        meta = json.loads((root / "meta.json").read_text())
        meta["format_version"] = version
        (root / "meta.json").write_text(json.dumps(meta))
        with pytest.raises(PartitionFormatError, match="is_hetero"):
            PartitionReader(root)


def test_homogeneous_api_on_a_hetero_dataset_raises_a_kind_mismatch(hetero_root):
    reader = PartitionReader(hetero_root)
    with pytest.raises(GraphKindMismatchError, match="heterogeneous"):
        _ = reader.book
    with pytest.raises(GraphKindMismatchError, match="name the node type"):
        reader.load_nodes(None, 0)
    with pytest.raises(GraphKindMismatchError, match="name the edge type"):
        reader.load_edges(None, 0)
    part = reader.load_part(0)
    for attr in ("node_ids", "indptr", "node_features", "edge_features"):
        with pytest.raises(GraphKindMismatchError, match="heterogeneous"):
            getattr(part, attr)


def test_hetero_api_on_a_homogeneous_dataset_raises_a_kind_mismatch(homo_root):
    reader = PartitionReader(homo_root)
    with pytest.raises(GraphKindMismatchError, match="homogeneous"):
        _ = reader.hetero_book
    with pytest.raises(GraphKindMismatchError, match="homogeneous"):
        reader.load_nodes("paper", 0)
    with pytest.raises(GraphKindMismatchError, match="homogeneous"):
        reader.load_edges(("a", "b", "c"), 0)
    assert torch.equal(reader.load_nodes(None, 1).node_ids, reader.load_part(1).node_ids)


def test_unknown_types_are_named_with_what_exists(hetero_root):
    reader = PartitionReader(hetero_root)
    with pytest.raises(UnknownTypeError, match=r"no node type 'venue'.*'paper', 'author'"):
        reader.load_nodes("venue", 0)
    with pytest.raises(UnknownTypeError, match=r"no edge type \('paper', 'x', 'paper'\)"):
        reader.load_edges(("paper", "x", "paper"), 0)
    with pytest.raises(UnknownTypeError, match="no node type 'venue'"):
        reader.hetero_book.part_of("venue", torch.tensor([0]))
    with pytest.raises(UnknownTypeError):
        reader.edge_type_key("nope")


def test_per_type_counts_that_do_not_add_up_are_refused(hetero_root):
    meta = json.loads((hetero_root / "meta.json").read_text())
    meta["parts"][1]["node_types"][0]["num_halo_nodes"] += 1
    (hetero_root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match=r"parts\[1\]\.stats\.num_halo_nodes"):
        PartitionReader(hetero_root)


def test_a_changed_type_file_fails_its_checksum(hetero_root):
    from pyg_dist.errors import ChecksumMismatchError

    path = hetero_root / "part-1" / "edges__author__writes__paper.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1  # a data byte: the header stays valid
    path.write_bytes(bytes(raw))
    reader = PartitionReader(hetero_root)
    reader.load_nodes("paper", 1)
    with pytest.raises(ChecksumMismatchError):
        reader.load_edges(("author", "writes", "paper"), 1)


def test_a_failing_partitioner_leaves_nothing_behind(tmp_path, hetero_graph, monkeypatch):
    module = tmp_path / "short_partitioner.py"
    module.write_text(
        "import torch\n"
        "class Short:\n"
        "    def assign(self, graph, num_parts):\n"
        "        return torch.zeros(graph.num_nodes - 1, dtype=torch.long)\n"
        "    def options(self):\n"
        "        return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from importlib.metadata import EntryPoint

    from pyg_dist.plugins import PARTITIONERS, PluginRegistry

    registry = PluginRegistry([EntryPoint("short", "short_partitioner:Short", PARTITIONERS)])
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InvalidPartitionArgumentError, match="one per node"):
        pyg_dist.partition(hetero_graph, 2, out / "ds", "short", registry=registry)
    assert list(out.iterdir()) == []
