"""Bad input gets a typed error and leaves no partial output behind."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from torch_geometric.data import Data

import pyg_dist
from pyg_dist.errors import (
    ChecksumMismatchError,
    InvalidPartitionArgumentError,
    PartitionFormatError,
    PluginNotFoundError,
)
from pyg_dist.partitioning import PartitionReader


def _assert_nothing_written(tmp_path):
    """Nothing at ROOT and no temporary directory beside it."""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("num_parts", [0, -1, 2709])
def test_num_parts_out_of_range(tmp_path, cora_graph, num_parts):
    with pytest.raises(InvalidPartitionArgumentError, match="num_parts"):
        pyg_dist.partition(cora_graph, num_parts, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)


def test_num_parts_not_an_int(tmp_path, cora_graph):
    with pytest.raises(InvalidPartitionArgumentError, match="int"):
        pyg_dist.partition(cora_graph, 2.0, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)


@pytest.mark.parametrize("data", [
    Data(x=torch.empty(0, 4), edge_index=torch.empty(2, 0, dtype=torch.long)),
    Data(),
])
def test_graph_with_no_nodes(tmp_path, data):
    with pytest.raises(InvalidPartitionArgumentError, match="no nodes"):
        pyg_dist.partition(data, 1, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)


def test_edge_index_out_of_range(tmp_path):
    data = Data(x=torch.zeros(3, 1), edge_index=torch.tensor([[0, 1], [1, 5]]))
    with pytest.raises(InvalidPartitionArgumentError, match="outside"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)


def test_sparse_adjacency_instead_of_edge_index(tmp_path):
    data = Data(x=torch.zeros(3, 1), adj_t=torch.eye(3).to_sparse())
    with pytest.raises(InvalidPartitionArgumentError, match="adj_t"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)


def test_not_a_data_object(tmp_path):
    with pytest.raises(InvalidPartitionArgumentError, match="Data"):
        pyg_dist.partition({"x": 1}, 2, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)


def test_reserved_attribute_name(tmp_path):
    data = Data(edge_index=torch.tensor([[0], [1]]), node_ids=torch.arange(2))
    with pytest.raises(InvalidPartitionArgumentError, match="reserved"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)


def test_unknown_partitioner_lists_the_installed_ones(tmp_path, cora_graph):
    with pytest.raises(PluginNotFoundError) as info:
        pyg_dist.partition(cora_graph, 2, tmp_path / "ds", "no-such-partitioner")
    assert "metis" in str(info.value) and "random" in str(info.value)
    _assert_nothing_written(tmp_path)


def test_unknown_partitioner_option(tmp_path, cora_graph):
    with pytest.raises(InvalidPartitionArgumentError, match="bogus"):
        pyg_dist.partition(cora_graph, 2, tmp_path / "ds", "metis", bogus=1)
    _assert_nothing_written(tmp_path)


def test_bad_partitioner_option_value(tmp_path, cora_graph):
    with pytest.raises(InvalidPartitionArgumentError, match="balance_train"):
        pyg_dist.partition(cora_graph, 2, tmp_path / "ds", "metis", balance_train="yes")
    _assert_nothing_written(tmp_path)


def test_balance_train_without_a_train_mask(tmp_path):
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
    with pytest.raises(InvalidPartitionArgumentError, match="train_mask"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "metis", balance_train=True)
    _assert_nothing_written(tmp_path)


def test_non_empty_root_is_refused_and_kept(tmp_path, cora_graph):
    root = tmp_path / "ds"
    root.mkdir()
    (root / "precious.txt").write_text("keep me")
    with pytest.raises(InvalidPartitionArgumentError, match="overwrite"):
        pyg_dist.partition(cora_graph, 2, root, "random")
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]
    assert (root / "precious.txt").read_text() == "keep me"


def test_failure_while_writing_removes_the_temporary_directory(tmp_path):
    # A meta-device feature passes validation but cannot be copied to disk:
    # the writer fails after it created its temporary directory.
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
                x=torch.empty(4, 2, device="meta"))
    with pytest.raises(NotImplementedError):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)


def test_failure_removes_the_parent_directories_it_created(tmp_path):
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
                x=torch.empty(4, 2, device="meta"))
    with pytest.raises(NotImplementedError):
        pyg_dist.partition(data, 2, tmp_path / "new" / "deeper" / "ds", "random")
    _assert_nothing_written(tmp_path)


def test_failure_while_overwriting_keeps_the_old_dataset(tmp_path, fake_graph):
    root = tmp_path / "ds"
    pyg_dist.partition(fake_graph, 2, root, "random")
    before = json.loads((root / "meta.json").read_text())
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
                x=torch.empty(4, 2, device="meta"))
    with pytest.raises(NotImplementedError):
        pyg_dist.partition(data, 2, root, "random", overwrite=True)
    assert json.loads((root / "meta.json").read_text()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]
    PartitionReader(root).verify_all()


def test_partitioner_returning_bad_ids_is_rejected(tmp_path, monkeypatch, cora_graph):
    module = tmp_path / "plugin_src" / "bad_partitioner.py"
    module.parent.mkdir()
    module.write_text(textwrap.dedent("""
        import torch

        class OutOfRange:
            def assign(self, graph, num_parts):
                return torch.full((graph.num_nodes,), num_parts)

            def options(self):
                return {}
    """))
    monkeypatch.syspath_prepend(str(module.parent))
    from importlib.metadata import EntryPoint

    from pyg_dist.plugins import PARTITIONERS, PluginRegistry

    registry = PluginRegistry([EntryPoint("bad", "bad_partitioner:OutOfRange", PARTITIONERS)])
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InvalidPartitionArgumentError, match="part ids"):
        pyg_dist.partition(cora_graph, 2, out / "ds", "bad", registry=registry)
    assert list(out.iterdir()) == []


# Reading ##################################################################


@pytest.fixture
def dataset(tmp_path, cora_graph):
    root = tmp_path / "ds"
    pyg_dist.partition(cora_graph, 2, root, "random")
    return root


def test_tampered_file_fails_its_checksum(dataset):
    path = dataset / "part-1" / "nodes.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # flip bits in the last feature row
    path.write_bytes(bytes(raw))
    reader = PartitionReader(dataset)
    reader.load_part(0)  # untouched part still loads
    with pytest.raises(ChecksumMismatchError) as info:
        reader.load_part(1)
    assert info.value.path.endswith("part-1/nodes.safetensors")
    with pytest.raises(ChecksumMismatchError):
        reader.verify_all()
    # Opting out of verification loads the (corrupted) bytes.
    PartitionReader(dataset, verify=False).load_part(1)


def test_tampered_book_fails_its_checksum(dataset):
    path = dataset / "book.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(ChecksumMismatchError):
        PartitionReader(dataset).book  # noqa: B018 - the property loads the book


def _edit_meta(root, change):
    meta = json.loads((root / "meta.json").read_text())
    change(meta)
    (root / "meta.json").write_text(json.dumps(meta))


def test_other_format_version_is_refused(dataset):
    _edit_meta(dataset, lambda m: m.update(format_version=99))
    with pytest.raises(PartitionFormatError, match="version 99"):
        PartitionReader(dataset)


def test_not_a_dataset(tmp_path):
    with pytest.raises(PartitionFormatError, match="meta.json"):
        PartitionReader(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(PartitionFormatError):
        PartitionReader(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(PartitionFormatError, match="not a pyg-dist-partition"):
        PartitionReader(tmp_path)


@pytest.mark.parametrize("name", ["/etc/passwd", "../outside.safetensors",
                                  "part-0/../../outside.safetensors", "part-0\\x"])
def test_file_names_must_stay_inside_root(dataset, name):
    def escape(meta):
        old = meta["parts"][0]["node_types"][0]["file"]
        meta["parts"][0]["node_types"][0]["file"] = name
        meta["files"][name] = meta["files"].pop(old)

    _edit_meta(dataset, escape)
    with pytest.raises(PartitionFormatError, match="not a relative path"):
        PartitionReader(dataset)


def test_missing_part_file(dataset):
    (dataset / "part-0" / "edges.safetensors").unlink()
    with pytest.raises(PartitionFormatError, match="missing"):
        PartitionReader(dataset).load_part(0)


@pytest.mark.parametrize("part", [-1, 2, "0", True])
def test_part_index_out_of_range(dataset, part):
    with pytest.raises(InvalidPartitionArgumentError):
        PartitionReader(dataset).load_part(part)


def test_attribute_of_a_dtype_the_format_does_not_store(tmp_path):
    data = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2,
                z=torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(InvalidPartitionArgumentError, match="'z'.*complex64"):
        pyg_dist.partition(data, 2, tmp_path / "ds", "random")
    _assert_nothing_written(tmp_path)
