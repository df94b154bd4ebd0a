"""Partitioning from files (``pyg_dist.partitioning.out_of_core``): the same
dataset as the in-memory writer, byte for byte; bounded memory; typed errors
on bad input; the bundled streaming partitioners."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch_geometric.data import Data

from pyg_dist.errors import InvalidPartitionArgumentError, PartitionMemoryError
from pyg_dist.partitioning import PartitionReader, partition
from pyg_dist.partitioning.file_export import write_data_files, write_ogb_files
from pyg_dist.partitioning.memory_limit import current_rss, parse_size
from pyg_dist.partitioning.out_of_core import partition_files
from pyg_dist.partitioning.safetensors_stream import SafetensorsFile


def _graph(num_nodes: int = 600, num_edges: int = 5000, seed: int = 0) -> Data:
    """Random edges, a hub with more in-edges than a test chunk, self loops,
    duplicates and isolated nodes; float, int and bool node attributes; a
    float matrix and an int vector of edge attributes."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes - 20, (num_edges,), generator=gen)
    dst = torch.randint(0, num_nodes - 20, (num_edges,), generator=gen)
    dst[:1000] = 7  # the hub: one destination bigger than a bucket
    src[5:10] = dst[5:10]  # self loops
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([src[:50], dst[:50]])], 1)
    num_edges = edge_index.size(1)
    return Data(edge_index=edge_index, num_nodes=num_nodes,
                edge_attr=torch.randn(num_edges, 3, generator=gen),
                edge_kind=torch.randint(0, 9, (num_edges,), generator=gen, dtype=torch.int16),
                x=torch.randn(num_nodes, 5, generator=gen),
                y=torch.randint(0, 4, (num_nodes,), generator=gen),
                train_mask=torch.rand(num_nodes, generator=gen) < 0.3)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_streamed_safetensors_are_byte_identical_to_save_file(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {"x": rng.random((7, 3)).astype(np.float32), "node_ids": np.arange(7),
               "train_mask": rng.random(7) > 0.5, "b": np.arange(7, dtype=np.uint8),
               "h": np.ones((7, 2), np.float16), "empty": np.zeros((0, 4), np.float32),
               "i16": np.arange(7, dtype=np.int16), "d": np.zeros(7)}
    save_file(tensors, str(tmp_path / "ref"))
    with SafetensorsFile(tmp_path / "mine", {k: (v.dtype, v.shape)
                                             for k, v in tensors.items()}) as out:
        for name, value in reversed(tensors.items()):  # any order, in pieces
            cut = min(3, len(value))
            out.write_rows(name, 0, value[:cut])
            out.write_rows(name, cut, value[cut:])
    assert (tmp_path / "mine").read_bytes() == (tmp_path / "ref").read_bytes()


def test_streamed_bfloat16_rows_are_byte_identical_to_torch_save_file(tmp_path):
    from safetensors.torch import save_file

    from pyg_dist.partitioning.safetensors_stream import BFLOAT16

    tensors = {"x": torch.randn(5, 3).bfloat16(), "h": torch.randn(5, 2).half(),
               "f": torch.randn(5), "node_ids": torch.arange(5), "m": torch.ones(5).bool()}
    save_file(tensors, str(tmp_path / "ref"))
    rows = {k: v.view(torch.int16).numpy().view(BFLOAT16) if v.dtype == torch.bfloat16
            else v.numpy() for k, v in tensors.items()}
    with SafetensorsFile(tmp_path / "mine", {k: (v.dtype, v.shape)
                                             for k, v in rows.items()}) as out:
        for name, value in rows.items():
            out.write_rows(name, 0, value)
    assert (tmp_path / "mine").read_bytes() == (tmp_path / "ref").read_bytes()


@pytest.mark.parametrize("partitioner", ["hash", "random", "streaming"])
def test_files_give_the_in_memory_dataset_byte_for_byte(tmp_path, partitioner):
    data = _graph()
    source = write_data_files(data, tmp_path / "files")
    options = {"chunk_edges": 777} if partitioner == "streaming" else {}
    partition(data, 3, tmp_path / "memory", partitioner, graph_name="g", **options)
    # Chunks of 777 edges: several shuffle chunks, CSC buckets and node windows.
    partition_files(source, 3, tmp_path / "files-out", partitioner, graph_name="g",
                    chunk_edges=777, memory_limit=current_rss() + (256 << 20))
    memory, files = _files(tmp_path / "memory"), _files(tmp_path / "files-out")
    assert sorted(memory) == sorted(files)
    for name in memory:
        assert memory[name] == files[name], name
    reader = PartitionReader(tmp_path / "files-out", verify=True)
    reader.verify_all()
    assert reader.num_edges == data.num_edges
    part = reader.load_part(1)
    assert set(part.edge_features) == {"edge_attr", "edge_kind"}
    assert torch.equal(part.edge_features["edge_attr"], data.edge_attr[part.edge_ids])


def test_hash_and_streaming_are_deterministic_for_a_seed(tmp_path):
    source = write_data_files(_graph(), tmp_path / "files")

    def book(name: str, **options) -> bytes:
        root = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}"
        partition_files(source, 4, root, name, chunk_edges=1000, **options)
        return (root / "book.safetensors").read_bytes()

    for name in ("hash", "streaming"):
        assert book(name, seed=3) == book(name, seed=3)
        assert book(name, seed=3) != book(name, seed=4)


def _community_graph(num_nodes: int = 4000, num_edges: int = 60000) -> Data:
    """Communities of 40 nodes (shuffled ids), 80% of edges inside one."""
    rng = np.random.default_rng(5)
    community = rng.permutation(num_nodes) // 40
    members = np.argsort(community, kind="stable")
    src = rng.integers(0, num_nodes, num_edges)
    inside = members[community[src] * 40 + rng.integers(0, 40, num_edges)]
    dst = np.where(rng.random(num_edges) < 0.8, inside, rng.integers(0, num_nodes, num_edges))
    return Data(edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=num_nodes,
                train_mask=torch.from_numpy(rng.random(num_nodes) < 0.2))


def test_streaming_cuts_far_fewer_edges_than_random_and_balances_training_nodes(tmp_path):
    source = write_data_files(_community_graph(), tmp_path / "files")
    cut = {}
    for name in ("random", "streaming", "hash"):
        meta = partition_files(source, 4, tmp_path / name, name)
        cut[name] = meta["stats"]["edge_cut_fraction"]
        if name == "streaming":
            train = [p["stats"]["num_train_nodes"] for p in meta["parts"]]
            nodes = [p["stats"]["num_nodes"] for p in meta["parts"]]
            assert max(train) * 4 / sum(train) <= 1.06
            assert max(nodes) * 4 / sum(nodes) <= 1.06
    assert cut["streaming"] <= 0.6 * cut["random"], cut
    assert cut["hash"] > 0.6  # a random assignment cuts about 3/4


def _write_edges(directory: Path, table: pa.Table) -> None:
    (directory / "edges").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, directory / "edges" / "e.parquet")


@pytest.mark.parametrize("make, message", [
    (lambda d: _write_edges(d, pa.table({"src": [0, 1], "dst": [1, 9]})), "outside [0, 5)"),
    (lambda d: _write_edges(d, pa.table({"src": [0, -1], "dst": [1, 2]})), "outside [0, 5)"),
    (lambda d: _write_edges(d, pa.table({"src": [0.5], "dst": [1.0]})), "integer columns"),
    (lambda d: _write_edges(d, pa.table({"a": [0], "dst": [1]})), "integer columns"),
    (lambda d: _write_edges(d, pa.table({"src": pa.array([0, None], pa.int64()),
                                         "dst": [1, 2]})), "nulls"),
    (lambda d: (d / "edges").mkdir(), "no .parquet"),
    (lambda d: d.mkdir(exist_ok=True), "no edges/ directory"),
])
def test_bad_edge_files_are_refused_and_nothing_is_left(tmp_path, make, message):
    source = tmp_path / "files"
    source.mkdir()
    (source / "nodes").mkdir()
    np.save(source / "nodes" / "x.npy", np.zeros((5, 2), np.float32))
    make(source)
    with pytest.raises(InvalidPartitionArgumentError, match=message.replace("[", r"\[")
                       .replace(")", r"\)").replace(".", r"\.")):
        partition_files(source, 2, tmp_path / "out", "hash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["files"]


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((5, 2), np.float32), "y": np.zeros(4, np.int64)}, "disagree"),
    ({"x": np.array([None] * 5, dtype=object)}, "not a readable .npy"),
    ({"node_ids": np.zeros(5, np.int64)}, "reserved|rename"),
    ({"x": np.zeros((5, 2), np.complex64)}, "dtype"),
    ({"train_mask": np.zeros(5, np.int64)}, "1-D bool"),
    ({}, "node count"),
])
def test_bad_node_arrays_are_refused(tmp_path, arrays, message):
    source = tmp_path / "files"
    _write_edges(source, pa.table({"src": [0, 1], "dst": [1, 2]}))
    (source / "nodes").mkdir()
    for name, value in arrays.items():
        np.save(source / "nodes" / f"{name}.npy", value)
    with pytest.raises(InvalidPartitionArgumentError, match=message):
        partition_files(source, 2, tmp_path / "out", "hash")
    assert not (tmp_path / "out").exists()


def test_a_limit_below_the_footprint_is_a_memory_error_naming_the_need(tmp_path):
    source = write_data_files(_graph(), tmp_path / "files")
    with pytest.raises(PartitionMemoryError, match="at least") as info:
        partition_files(source, 2, tmp_path / "out", "hash", memory_limit=current_rss())
    assert info.value.need > current_rss()
    assert not (tmp_path / "out").exists()


def test_metis_from_files_works_when_it_fits_and_names_its_need_when_not(tmp_path):
    source = write_data_files(_graph(), tmp_path / "files")
    meta = partition_files(source, 2, tmp_path / "fits", "metis")
    assert meta["partitioner"]["name"] == "metis"
    with pytest.raises(PartitionMemoryError, match="needs the whole graph in memory") as info:
        partition_files(source, 2, tmp_path / "no", "metis",
                        memory_limit=current_rss() + (64 << 20))
    assert info.value.need > current_rss() + (64 << 20)
    assert "-p streaming" in str(info.value)


def test_parse_size_reads_units_and_refuses_garbage():
    assert parse_size("1536M") == 1536 << 20
    assert parse_size("4G") == parse_size("4GiB") == 4 << 30
    assert parse_size("1048576") == 1 << 20
    for bad in ("", "4X", "-1G", "G", "0"):
        with pytest.raises(InvalidPartitionArgumentError):
            parse_size(bad)


def test_an_ogb_directory_converts_into_files_and_partitions(tmp_path):
    ogb = tmp_path / "ogbn-tiny"
    (ogb / "raw").mkdir(parents=True)
    (ogb / "split" / "time").mkdir(parents=True)
    rng = np.random.default_rng(2)
    edges = rng.integers(0, 30, (100, 2))
    feats = rng.random((30, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 30).astype(float)
    labels[3] = np.nan

    def write(path: Path, rows: list[str]) -> None:
        with gzip.open(path, "wt") as f:
            f.write("\n".join(rows) + "\n")

    write(ogb / "raw" / "edge.csv.gz", [f"{a},{b}" for a, b in edges])
    write(ogb / "raw" / "num-node-list.csv.gz", ["30"])
    write(ogb / "raw" / "node-feat.csv.gz", [",".join(f"{v!r}" for v in row)
                                             for row in feats.tolist()])
    write(ogb / "raw" / "node-label.csv.gz", ["nan" if np.isnan(v) else str(int(v))
                                              for v in labels])
    write(ogb / "split" / "time" / "train.csv.gz", ["0", "5", "7"])
    write(ogb / "split" / "time" / "test.csv.gz", ["1"])
    source = write_ogb_files(ogb, tmp_path / "files")
    assert np.array_equal(np.load(source / "nodes" / "x.npy"), feats)
    y = np.load(source / "nodes" / "y.npy")
    assert y[3] == -1 and np.array_equal(np.delete(y, 3), np.delete(labels, 3).astype(int))
    assert np.flatnonzero(np.load(source / "nodes" / "train_mask.npy")).tolist() == [0, 5, 7]
    meta = partition_files(source, 2, tmp_path / "out", "hash")
    assert meta["num_edges"] == 100 and meta["num_nodes"] == 30
    assert sum(p["stats"]["num_train_nodes"] for p in meta["parts"]) == 3


# The child's peak RSS is VmHWM, the high-water mark of its own address space:
# ru_maxrss would carry over exec the RSS of the forking parent (pytest).
_CHILD = textwrap.dedent("""
    import json, sys
    from pyg_dist.partitioning.out_of_core import partition_files
    meta = partition_files(sys.argv[1], 4, sys.argv[2], sys.argv[3],
                           memory_limit=int(sys.argv[4]))
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"peak": int(hwm.split()[1]) * 1024,
                      "torch": "torch" in sys.modules, "edges": meta["num_edges"]}))
""")


def _big_graph(directory: Path, num_nodes: int, features: int, num_edges: int) -> int:
    """Writes a random graph in bounded memory; returns its bytes (edges + x)."""
    rng = np.random.default_rng(0)
    (directory / "edges").mkdir(parents=True)
    (directory / "nodes").mkdir()
    schema = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
    with pq.ParquetWriter(directory / "edges" / "e.parquet", schema) as writer:
        for start in range(0, num_edges, 1 << 20):
            n = min(1 << 20, num_edges - start)
            writer.write_table(pa.table({"src": rng.integers(0, num_nodes, n),
                                         "dst": rng.integers(0, num_nodes, n)}),
                               row_group_size=1 << 16)
    with open(directory / "nodes" / "x.npy", "wb") as f:
        np.lib.format.write_array_header_2_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (num_nodes, features)})
        for start in range(0, num_nodes, 1 << 16):
            f.write(rng.random((min(1 << 16, num_nodes - start), features),
                               dtype=np.float32).tobytes())
    np.save(directory / "nodes" / "train_mask.npy", rng.random(num_nodes) < 0.1)
    return num_edges * 16 + num_nodes * features * 4


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_peak_rss_stays_under_a_limit_ten_times_smaller_than_the_graph(tmp_path):
    # 192 MiB: the process alone holds 120-130 MB once pyarrow has decoded a
    # batch (pyarrow 25); the graph is 1.92 GB.
    limit = 192 << 20
    size = _big_graph(tmp_path / "files", num_nodes=1_000_000, features=416,
                      num_edges=16_000_000)
    assert size >= 9 * limit
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "files"),
                           str(tmp_path / "out"), "streaming", str(limit)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    # No allowance over the limit. The 1-4% overshoot once measured here
    # (192.8-200.4 MiB) was memory the allocators kept within a pass:
    # glibc's growing mmap threshold and pyarrow's mimalloc pool
    # (memory_limit.bounded_allocation fixes both). Measured since: 167 MiB
    # (two runs, load 6-7), 13% under the limit, more than the 2% by which
    # CI's fresh clones peaked above the development machine before.
    assert result["peak"] < limit, result
    assert not result["torch"]
    reader = PartitionReader(tmp_path / "out", verify=True)
    assert reader.num_edges == result["edges"] == 16_000_000
