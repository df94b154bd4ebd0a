"""Partition, read every part back, and reassemble exactly the original graph."""

from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.partitioning import PartitionReader


def _graph(request, name):
    return request.getfixturevalue(f"{name}_graph")


@pytest.mark.parametrize("graph_name", ["cora", "fake"])
@pytest.mark.parametrize("num_parts", [2, 4])
@pytest.mark.parametrize("partitioner", ["metis", "random"])
def test_round_trip_reassembles_the_original_graph(request, tmp_path, reassembled,
                                                   graph_name, num_parts, partitioner):
    data = _graph(request, graph_name)
    root = tmp_path / "ds"
    pyg_dist.partition(data, num_parts, root, partitioner)
    reader = PartitionReader(root)  # verify=True: every file's checksum is checked
    assert reader.num_parts == num_parts
    rebuilt, owned = reassembled(reader)

    # Edge set, in the original edge order (edge ids are columns of edge_index).
    assert torch.equal(rebuilt.edge_index, data.edge_index)
    for key in data.keys():
        if key == "edge_index":
            continue
        assert torch.equal(rebuilt[key], data[key]), key
        assert rebuilt[key].dtype == data[key].dtype, key
    assert sum(ids.numel() for ids in owned) == data.num_nodes
    assert reader.meta["num_edges"] == data.num_edges


def test_each_owned_node_has_its_full_in_neighbourhood(tmp_path, cora_graph):
    data = cora_graph
    reader = pyg_dist.partition(data, 4, tmp_path / "ds", "metis")
    src, dst = data.edge_index
    for k in range(4):
        part = reader.load_part(k)
        for local in torch.randperm(part.node_ids.numel())[:200].tolist():
            node = int(part.node_ids[local])
            begin, end = int(part.indptr[local]), int(part.indptr[local + 1])
            stored = sorted(part.indices[begin:end].tolist())
            assert stored == sorted(src[dst == node].tolist())


def test_mmap_load_equals_memory_load(tmp_path, fake_graph):
    reader = pyg_dist.partition(fake_graph, 3, tmp_path / "ds", "random")
    for k in range(3):
        a, b = reader.load_part(k), reader.load_part(k, mmap=True)
        assert torch.equal(a.node_ids, b.node_ids)
        assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
        assert torch.equal(a.edge_ids, b.edge_ids)
        assert a.node_features.keys() == b.node_features.keys()
        for name in a.node_features:
            assert torch.equal(a.node_features[name], b.node_features[name])
        assert torch.equal(a.edge_features["edge_attr"], b.edge_features["edge_attr"])


def test_partial_loads(tmp_path, cora_graph):
    reader = pyg_dist.partition(cora_graph, 2, tmp_path / "ds", "random")
    topo_only = reader.load_part(1, features=False)
    assert topo_only.node_features == {} and topo_only.indices.numel() > 0
    feats_only = reader.load_part(1, topology=False)
    assert feats_only.edges == {} and feats_only.node_features["x"].shape[1] == 1433


def test_meta_records_types_counts_partitioner_and_checksums(tmp_path, cora_graph):
    reader = pyg_dist.partition(cora_graph, 2, tmp_path / "ds", "metis", balance_train=True,
                                graph_name="cora")
    meta = reader.meta
    assert meta["format_version"] == pyg_dist.partitioning.FORMAT_VERSION
    assert meta["graph_name"] == "cora"
    assert meta["num_nodes"] == 2708 and meta["num_edges"] == 10556
    assert meta["node_types"][0]["type"] is None and meta["edge_types"][0]["type"] is None
    assert meta["node_types"][0]["features"]["x"] == {"dtype": "float32", "shape": [1433]}
    assert meta["partitioner"]["name"] == "metis"
    assert meta["partitioner"]["options"]["balance_train"] is True
    assert meta["partitioner"]["distribution"].startswith("pyg-dist")
    assert set(meta["files"]) == {"book.safetensors", "part-0/nodes.safetensors",
                                  "part-0/edges.safetensors", "part-1/nodes.safetensors",
                                  "part-1/edges.safetensors"}
    assert all(len(f["sha256"]) == 64 for f in meta["files"].values())
    assert sum(p["stats"]["num_nodes"] for p in meta["parts"]) == 2708
    assert reader.node_types == [None] and reader.edge_types == [None]
    reader.verify_all()


def test_single_part_holds_everything(tmp_path, fake_graph, reassembled):
    reader = pyg_dist.partition(fake_graph, 1, tmp_path / "ds", "metis")
    rebuilt, _ = reassembled(reader)
    assert torch.equal(rebuilt.edge_index, fake_graph.edge_index)
    assert reader.meta["stats"]["edge_cut"] == 0
    assert reader.meta["parts"][0]["stats"]["num_halo_nodes"] == 0


def test_overwrite_replaces_an_existing_dataset(tmp_path, cora_graph):
    root = tmp_path / "ds"
    pyg_dist.partition(cora_graph, 2, root, "random")
    reader = pyg_dist.partition(cora_graph, 4, root, "random", overwrite=True)
    assert reader.num_parts == 4
    assert sorted(p.name for p in root.iterdir()) == [
        "book.safetensors", "meta.json", "part-0", "part-1", "part-2", "part-3"]
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_empty_existing_directory_is_accepted(tmp_path, fake_graph):
    root = tmp_path / "ds"
    root.mkdir()
    assert pyg_dist.partition(fake_graph, 2, root, "random").num_parts == 2


def test_more_than_256_parts_use_an_int16_book(tmp_path, fake_graph, reassembled):
    reader = pyg_dist.partition(fake_graph, 300, tmp_path / "ds", "random")
    assert reader.meta["books"][0]["dtype"] == "int16"
    assert reader.book.to_tensor().dtype == torch.int16
    rebuilt, owned = reassembled(reader)
    assert torch.equal(rebuilt.edge_index, fake_graph.edge_index)
    assert len(owned) == 300
