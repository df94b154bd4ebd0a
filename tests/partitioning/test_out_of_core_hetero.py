"""Partitioning a graph laid out by type from files: the same version-2
dataset as ``partition(HeteroData)``, file for file and byte for byte, edge
attributes included; typed errors on a malformed layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch_geometric.data import HeteroData

from pyg_dist.errors import InvalidPartitionArgumentError
from pyg_dist.partitioning import PartitionReader, partition
from pyg_dist.partitioning.file_export import write_hetero_data_files
from pyg_dist.partitioning.memory_limit import current_rss
from pyg_dist.partitioning.out_of_core import partition_files


def _hetero(seed: int = 0) -> HeteroData:
    """Types in an order that is not sorted; ``topic`` has no attribute (its
    count comes from graph.json); a hub destination bigger than a chunk;
    edge attributes on two edge types; training nodes on one type."""
    gen = torch.Generator().manual_seed(seed)
    sizes = {"paper": 500, "author": 300, "topic": 40}
    data = HeteroData()
    data["paper"].x = torch.randn(500, 4, generator=gen)
    data["paper"].y = torch.randint(0, 3, (500,), generator=gen)
    data["paper"].train_mask = torch.rand(500, generator=gen) < 0.3
    data["author"].x = torch.randn(300, 2, generator=gen).half()
    data["topic"].num_nodes = 40

    def edges(src: str, dst: str, n: int) -> torch.Tensor:
        return torch.stack([torch.randint(0, sizes[src], (n,), generator=gen),
                            torch.randint(0, sizes[dst], (n,), generator=gen)])

    writes = edges("author", "paper", 3000)
    writes[1, :900] = 7  # the hub
    data["author", "writes", "paper"].edge_index = writes
    data["author", "writes", "paper"].edge_attr = torch.randn(3000, 3, generator=gen)
    data["paper", "cites", "paper"].edge_index = edges("paper", "paper", 2000)
    data["paper", "cites", "paper"].edge_weight = torch.rand(2000, generator=gen).double()
    data["paper", "about", "topic"].edge_index = edges("paper", "topic", 700)
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    return data


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("partitioner", ["hash", "random", "streaming"])
def test_typed_files_give_the_in_memory_hetero_dataset_byte_for_byte(tmp_path, partitioner):
    data = _hetero()
    source = write_hetero_data_files(data, tmp_path / "files")
    assert sorted(p.name for p in (source / "edges").iterdir()) == [
        "author__writes__paper", "paper__about__topic", "paper__cites__paper",
        "paper__rev_writes__author"]
    options = {"chunk_edges": 777} if partitioner == "streaming" else {}
    partition(data, 3, tmp_path / "memory", partitioner, graph_name="g", **options)
    # Chunks of 777 edges: several shuffle chunks, CSC buckets, node windows,
    # and streaming chunks that span two edge types.
    partition_files(source, 3, tmp_path / "files-out", partitioner, graph_name="g",
                    chunk_edges=777, memory_limit=current_rss() + (256 << 20))
    memory, files = _files(tmp_path / "memory"), _files(tmp_path / "files-out")
    assert sorted(memory) == sorted(files)
    for name in memory:
        assert memory[name] == files[name], name
    reader = PartitionReader(tmp_path / "files-out", verify=True)
    reader.verify_all()
    assert reader.node_types == ["paper", "author", "topic"]
    edges = reader.load_edges(("author", "writes", "paper"), 1)
    assert torch.equal(edges.features["edge_attr"],
                       data["author", "writes", "paper"].edge_attr[edges.edge_ids])


def test_without_graph_json_types_come_in_name_order(tmp_path):
    source = write_hetero_data_files(_hetero(), tmp_path / "files")
    (source / "graph.json").unlink()
    (source / "nodes" / "topic").mkdir()
    np.save(source / "nodes" / "topic" / "y.npy", np.zeros(40, np.int64))
    meta = partition_files(source, 2, tmp_path / "out", "hash")
    assert [t["type"] for t in meta["node_types"]] == ["author", "paper", "topic"]
    assert [t["type"][1] for t in meta["edge_types"]] == ["writes", "about", "cites",
                                                          "rev_writes"]
    assert meta["num_edges"] == 3000 + 2000 + 700 + 3000
    assert PartitionReader(tmp_path / "out").num_nodes_of("topic") == 40


def _edge_dir(source: Path, name: str, src: list[int], dst: list[int]) -> Path:
    directory = source / "edges" / name
    directory.mkdir(parents=True)
    pq.write_table(pa.table({"src": src, "dst": dst}), directory / "e.parquet")
    return directory


def _two_types(source: Path) -> None:
    (source / "nodes" / "a").mkdir(parents=True)
    np.save(source / "nodes" / "a" / "x.npy", np.zeros((4, 2), np.float32))
    (source / "nodes" / "b").mkdir()
    np.save(source / "nodes" / "b" / "x.npy", np.zeros((3, 2), np.float32))


@pytest.mark.parametrize("make, message", [
    (lambda s: _edge_dir(s, "a__to__b", [0, 3], [1, 3]), r"outside \[0, 3\)"),
    (lambda s: _edge_dir(s, "a__to", [0], [1]), "SRC__REL__DST"),
    (lambda s: _edge_dir(s, "a__to__c", [0], [0]), "node count of type 'c'"),
    (lambda s: np.save(_edge_dir(s, "a__to__b", [0, 1], [1, 2]) / "w.npy", np.zeros(3)),
     "one row per edge"),
    (lambda s: np.save(_edge_dir(s, "a__to__b", [0, 1], [1, 2]) / "indices.npy",
                       np.zeros(2)), "rename"),
    (lambda s: (_edge_dir(s, "a__to__b", [0], [1]),
                pq.write_table(pa.table({"src": [0], "dst": [1]}),
                               s / "edges" / "e.parquet")), "mixes"),
    (lambda s: (_edge_dir(s, "a__to__b", [0], [1]),
                (s / "graph.json").write_text('{"node_types": {"a": 5, "b": 3}}')),
     "gives node type 'a' 5 nodes"),
    (lambda s: (_edge_dir(s, "a__to__b", [0], [1]),
                (s / "graph.json").write_text('{"node_types": {"a": 4}}')),
     "does not list"),
    (lambda s: (_edge_dir(s, "a__to__b", [0], [1]),
                (s / "graph.json").write_text('{"edge_types": [["a", "x", "b"]]}')),
     "differ from the directories"),
    (lambda s: (_edge_dir(s, "a__to__b", [0], [1]),
                (s / "graph.json").write_text('{"node_types": {"a": -1}}')),
     "non-negative integer"),
    (lambda s: (_edge_dir(s, "a__to__b", [0], [1]),
                (s / "graph.json").write_text('[1, 2')), "not JSON"),
])
def test_a_malformed_typed_layout_is_refused_and_nothing_is_left(tmp_path, make, message):
    source = tmp_path / "files"
    _two_types(source)
    make(source)
    with pytest.raises(InvalidPartitionArgumentError, match=message):
        partition_files(source, 2, tmp_path / "out", "hash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["files"]


def test_metis_gets_the_typed_graph_in_memory_when_it_fits(tmp_path):
    source = write_hetero_data_files(_hetero(), tmp_path / "files")
    meta = partition_files(source, 2, tmp_path / "out", "metis")
    assert meta["is_hetero"] and meta["format_version"] == 2
    balance = {t["type"]: t["balance"] for t in meta["node_types"]}
    assert balance["paper"] <= 1.1 and balance["author"] <= 1.1
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["partitioner"][
        "name"] == "metis"


def test_a_node_count_for_a_typed_layout_is_refused(tmp_path):
    from pyg_dist.partitioning.file_source import FileGraph

    source = write_hetero_data_files(_hetero(), tmp_path / "files")
    with pytest.raises(InvalidPartitionArgumentError, match="graph.json"):
        FileGraph.open(source, num_nodes=5)
