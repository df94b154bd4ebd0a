"""Heterogeneous graphs (format version 2): partition, read every part back
and reassemble exactly the input; per-type books, balance and statistics."""

from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.datasets import fake_hetero
from pyg_dist.partitioning import HETERO_FORMAT_VERSION, HeteroPartitionBook, PartitionReader


@pytest.mark.parametrize("num_parts", [2, 3])
@pytest.mark.parametrize("partitioner", ["metis", "random"])
def test_round_trip_reassembles_every_type(tmp_path, hetero_graph, reassembled_hetero,
                                           partitioner, num_parts):
    data = hetero_graph
    pyg_dist.partition(data, num_parts, tmp_path / "ds", partitioner)
    reader = PartitionReader(tmp_path / "ds")  # verify=True: checksums checked
    rebuilt = reassembled_hetero(reader)
    assert reader.node_types == data.node_types
    assert reader.edge_types == data.edge_types
    for node_type in data.node_types:
        for key, value in data[node_type].items():
            assert torch.equal(rebuilt[node_type][key], value), (node_type, key)
            assert rebuilt[node_type][key].dtype == value.dtype
    for edge_type in data.edge_types:
        for key, value in data[edge_type].items():
            assert torch.equal(rebuilt[edge_type][key], value), (edge_type, key)


def test_csc_lists_each_destinations_input_neighbours(tmp_path, hetero_graph):
    reader = pyg_dist.partition(hetero_graph, 3, tmp_path / "ds", "metis")
    edge_type = ("author", "writes", "paper")
    src, dst = hetero_graph[edge_type].edge_index
    for k in range(3):
        edges = reader.load_edges(edge_type, k)
        owned = reader.load_nodes("paper", k).node_ids
        for local, node in enumerate(owned.tolist()):
            begin, end = int(edges.indptr[local]), int(edges.indptr[local + 1])
            expected = (dst == node).nonzero().view(-1)
            assert edges.edge_ids[begin:end].tolist() == expected.tolist()
            assert edges.indices[begin:end].tolist() == src[expected].tolist()


def test_meta_names_one_file_per_type_and_records_per_type_stats(tmp_path, hetero_graph):
    reader = pyg_dist.partition(hetero_graph, 2, tmp_path / "ds", "metis")
    meta = reader.meta
    assert meta["format_version"] == HETERO_FORMAT_VERSION and meta["is_hetero"] is True
    assert meta["num_nodes"] == 243
    assert meta["num_edges"] == 500 + 600 + 90 + 500
    assert sorted(meta["files"]) == sorted(
        [f"book__{t}.safetensors" for t in ("paper", "author", "inst")]
        + [f"part-{k}/nodes__{t}.safetensors" for k in (0, 1)
           for t in ("paper", "author", "inst")]
        + [f"part-{k}/edges__{s}__{r}__{d}.safetensors" for k in (0, 1)
           for s, r, d in hetero_graph.edge_types])
    assert [e["type"] for e in meta["edge_types"]] == [list(t) for t in hetero_graph.edge_types]
    cut = sum(e["edge_cut"] for e in meta["edge_types"])
    assert cut == meta["stats"]["edge_cut"] > 0
    assert sum(p["stats"]["num_train_nodes"] for p in meta["parts"]) == \
        int(hetero_graph["paper"].train_mask.sum())
    assert reader.node_feature_specs("author") == {
        "x": {"dtype": "float32", "shape": [4]}, "year": {"dtype": "int32", "shape": []}}
    assert reader.edge_feature_specs(("author", "writes", "paper")) == {
        "edge_attr": {"dtype": "float32", "shape": [2]}}
    assert reader.edge_type_key("cites") == ("paper", "cites", "paper")
    reader.verify_all()


def test_cut_edges_and_halo_match_the_book(tmp_path, hetero_graph):
    reader = pyg_dist.partition(hetero_graph, 3, tmp_path / "ds", "random")
    book = reader.hetero_book
    for edge_type in hetero_graph.edge_types:
        src, _, dst = edge_type
        ei = hetero_graph[edge_type].edge_index
        cut = book.part_of(src, ei[0]) != book.part_of(dst, ei[1])
        entry = next(e for e in reader.meta["edge_types"] if tuple(e["type"]) == edge_type)
        assert entry["edge_cut"] == int(cut.sum())
    halo = 0
    for k in range(3):
        for node_type in hetero_graph.node_types:
            foreign = [hetero_graph[et].edge_index[0][
                (book.part_of(et[2], hetero_graph[et].edge_index[1]) == k)
                & (book.part_of(node_type, hetero_graph[et].edge_index[0]) != k)]
                for et in hetero_graph.edge_types if et[0] == node_type]
            halo += torch.unique(torch.cat(foreign)).numel() if foreign else 0
    assert reader.meta["stats"]["total_halo_nodes"] == halo


def test_book_maps_typed_ids_and_splits_batches(tmp_path, hetero_graph):
    reader = pyg_dist.partition(hetero_graph, 3, tmp_path / "ds", "random")
    book = reader.hetero_book
    assert isinstance(book, HeteroPartitionBook) and book.num_parts == 3
    assert book.node_types == ["paper", "author", "inst"]
    ids = torch.tensor([5, 0, 89, 5])
    parts = book.part_of("author", ids)
    for k in range(3):
        owned = reader.load_nodes("author", k, features=False).node_ids
        assert set(ids[parts == k].tolist()) <= set(owned.tolist())
    out = torch.empty_like(ids)
    for part, positions, group in book.split("author", ids):
        assert bool((book.part_of("author", group) == part).all())
        out[positions] = group
    assert torch.equal(out, ids)
    # "inst" has 3 nodes: random deals every type on its own, so each part gets one.
    assert book.counts()["inst"].tolist() == [1, 1, 1]


def test_edge_rows_find_the_csc_position_of_edge_ids(tmp_path, hetero_graph):
    reader = pyg_dist.partition(hetero_graph, 2, tmp_path / "ds", "metis")
    edges = reader.load_edges(("author", "writes", "paper"), 1)
    perm = torch.randperm(edges.num_edges, generator=torch.Generator().manual_seed(0))
    rows = edges.rows(edges.edge_ids[perm])
    assert torch.equal(rows, perm)
    attr = hetero_graph["author", "writes", "paper"].edge_attr
    assert torch.equal(edges.features["edge_attr"][rows], attr[edges.edge_ids[perm]])
    elsewhere = reader.load_edges(("author", "writes", "paper"), 0).edge_ids[:1]
    with pytest.raises(pyg_dist.errors.InvalidPartitionArgumentError, match="not stored"):
        edges.rows(elsewhere)
    assert edges.rows(torch.empty(0, dtype=torch.int64)).numel() == 0


def test_mmap_and_partial_loads(tmp_path, hetero_graph):
    reader = pyg_dist.partition(hetero_graph, 2, tmp_path / "ds", "random")
    a, b = reader.load_part(0), reader.load_part(0, mmap=True)
    for node_type in a.nodes:
        assert torch.equal(a.nodes[node_type].features["x"], b.nodes[node_type].features["x"])
    topo = reader.load_edges(("paper", "cites", "paper"), 1, features=False)
    assert topo.features == {} and topo.num_edges > 0
    nodes_only = reader.load_part(1, topology=False)
    assert nodes_only.edges == {} and set(nodes_only.nodes) == {"paper", "author", "inst"}
    (paper,) = [t for t in reader.meta["parts"][1]["node_types"] if t["type"] == "paper"]
    assert paper["num_nodes"] == nodes_only.nodes["paper"].node_ids.numel()


def test_metis_balances_every_node_type(tmp_path):
    data = fake_hetero(num_nodes=600, avg_degree=6, num_channels=4, seed=3)
    cuts = {}
    for name in ("metis", "random"):
        reader = pyg_dist.partition(data, 4, tmp_path / name, name)
        cuts[name] = reader.meta["stats"]["edge_cut"]
        for entry in reader.meta["node_types"]:
            assert entry["balance"] <= 1.05, (name, entry["type"], entry["balance"])
    print(f"FakeHetero 4 parts: edge cut {cuts}")
    assert cuts["metis"] < 0.9 * cuts["random"]


def test_metis_without_type_balance_is_recorded(tmp_path, hetero_graph):
    reader = pyg_dist.partition(hetero_graph, 2, tmp_path / "ds", "metis",
                                balance_ntypes=False, balance_train=True)
    assert reader.meta["partitioner"]["options"]["balance_ntypes"] is False
    reader = pyg_dist.partition(hetero_graph, 2, tmp_path / "d2", "metis", balance_train=True)
    assert "balance_ntypes" not in reader.meta["partitioner"]["options"]
    train = [p["node_types"][0]["num_train_nodes"] for p in reader.meta["parts"]]
    assert max(train) * 2 / sum(train) <= 1.1


def test_a_third_party_partitioner_sees_the_homogeneous_view(tmp_path, hetero_graph,
                                                              monkeypatch):
    # A plugin written for homogeneous graphs: it reads num_nodes and edge_index only.
    module = tmp_path / "halves_partitioner.py"
    module.write_text(
        "import torch\n"
        "class Halves:\n"
        "    def assign(self, graph, num_parts):\n"
        "        assert graph.edge_index.max() < graph.num_nodes\n"
        "        return (torch.arange(graph.num_nodes) * num_parts) // graph.num_nodes\n"
        "    def options(self):\n"
        "        return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from importlib.metadata import EntryPoint

    from pyg_dist.plugins import PARTITIONERS, PluginRegistry

    registry = PluginRegistry([EntryPoint("halves", "halves_partitioner:Halves",
                                          PARTITIONERS)])
    reader = pyg_dist.partition(hetero_graph, 2, tmp_path / "ds", "halves", registry=registry)
    # The view numbers paper (150), author (90), inst (3) one after another.
    book = reader.hetero_book
    # (view id * 2) // 243 puts view ids 0..121 in part 0: 122 papers.
    assert book.counts()["paper"].tolist() == [122, 28]
    assert book.counts()["author"].tolist() == [0, 90]
    assert book.counts()["inst"].tolist() == [0, 3]
