"""A damaged or crafted dataset is refused with a PartitionFormatError naming
the file and field, never a raw traceback and never served wrongly.

Every case edits a real dataset on disk. Edits of a tensor file update its
sha256 and size in ``meta.json``, so only the validation can catch them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

import pyg_dist
from pyg_dist.errors import PartitionFormatError
from pyg_dist.partitioning import PartitionReader
from pyg_dist.partitioning.format import sha256_file
from pyg_dist.server import PartitionServer

NODES0 = "part-0/nodes.safetensors"
NODES1 = "part-1/nodes.safetensors"
EDGES0 = "part-0/edges.safetensors"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, fake_graph) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "ds"
    pyg_dist.partition(fake_graph, 2, root, "random")
    return root


@pytest.fixture
def dataset(pristine, tmp_path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    return root


def _meta(root: Path) -> dict[str, Any]:
    return json.loads((root / "meta.json").read_text())


def _write_meta(root: Path, meta: Any) -> None:
    (root / "meta.json").write_text(json.dumps(meta))


def _edit_meta(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    meta = _meta(root)
    change(meta)
    _write_meta(root, meta)


def _edit_tensors(root: Path, name: str,
                  change: Callable[[dict[str, torch.Tensor]], None]) -> None:
    """Rewrites a tensor file and records its new sha256 and size in meta.json."""
    path = root / name
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path))
    meta = _meta(root)
    meta["files"][name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    _write_meta(root, meta)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A meta edit setting the field at a dotted path (``a.0.b``)."""
    def change(meta: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = meta
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return change


_DELETE = object()


def _shift_one_node(meta: dict[str, Any], with_stats: bool) -> None:
    for k, step in ((0, 1), (1, -1)):
        meta["parts"][k]["node_types"][0]["num_nodes"] += step
        if with_stats:
            meta["parts"][k]["stats"]["num_nodes"] += step


def _both_parts_one_file(meta: dict[str, Any]) -> None:
    meta["parts"][1]["node_types"][0]["file"] = NODES0


def _extra_file(meta: dict[str, Any]) -> None:
    meta["files"]["part-0/extra.safetensors"] = dict(meta["files"][NODES0])


# (id, edit of meta.json, text the error must contain: the field or tensor)
META_CASES = [
    ("num_nodes a string", _set("num_nodes", "600"), "field num_nodes"),
    ("num_nodes negative", _set("num_nodes", -5), "field num_nodes"),
    ("num_nodes huge", _set("num_nodes", 10**30), "field num_nodes"),
    ("num_nodes a bool", _set("num_nodes", True), "field num_nodes"),
    ("num_nodes off by one", lambda m: m.update(num_nodes=m["num_nodes"] + 1),
     "field node_types: counts sum to"),
    ("num_nodes missing", _set("num_nodes", _DELETE), "field num_nodes: is missing"),
    ("num_parts zero", _set("num_parts", 0), "field num_parts"),
    ("num_parts beyond the parts listed", _set("num_parts", 3), "field parts"),
    ("num_edges off", _set("num_edges", 1), "field edge_types"),
    ("empty books", _set("books", []), "field books"),
    ("book dtype", _set("books.0.dtype", "int16"), "field books[0].dtype"),
    ("book key missing", _set("books.0.key", _DELETE), "field books[0].key"),
    ("book of no node type", _set("books.0.type", "paper"), "field books[0].type"),
    ("no node types", _set("node_types", []), "field node_types"),
    ("node type not an object", _set("node_types.0", 3), "field node_types[0]"),
    ("feature dtype unknown", _set("node_types.0.features.x.dtype", "pickle"),
     "field node_types[0].features[x].dtype"),
    ("feature shape negative", _set("node_types.0.features.x.shape", [-1]),
     "field node_types[0].features[x].shape"),
    ("feature shape too deep", _set("node_types.0.features.x.shape", [1] * 9),
     "field node_types[0].features[x].shape"),
    ("feature shape smaller than the file", _set("node_types.0.features.x.shape", [1]),
     "tensor 'x'"),
    ("feature dtype other than the file", _set("node_types.0.features.x.dtype", "float64"),
     "tensor 'x'"),
    ("feature the files lack", _set("node_types.0.features.z", {"dtype": "float32",
                                                                 "shape": []}),
     "lacks the tensors ['z']"),
    ("feature the files hold but meta.json drops",
     lambda m: m["node_types"][0]["features"].pop("y"), "does not list"),
    ("edge type src", _set("edge_types.0.src", "paper"), "field edge_types[0].src"),
    ("is_hetero not a bool", _set("is_hetero", "no"), "field is_hetero"),
    ("is_hetero true for a null type", _set("is_hetero", True), "field is_hetero"),
    ("parts out of order", _set("parts.1.part", 0), "field parts[1].part"),
    ("part counts moved", lambda m: _shift_one_node(m, False),
     "field parts[0].stats.num_nodes"),
    ("part counts and stats moved", lambda m: _shift_one_node(m, True), "'node_ids'"),
    ("part stats missing", _set("parts.0.stats", _DELETE), "field parts[0].stats"),
    ("two parts share one file", _both_parts_one_file, "field parts[1].node_types[0].file"),
    ("file without checksum", lambda m: m["files"].pop(EDGES0), "field parts[0].edge_types"),
    ("file nobody refers to", _extra_file, "field files"),
    ("checksum not hex", lambda m: m["files"][NODES0].update(sha256="zz"),
     f"field files[{NODES0}].sha256"),
    ("stats fraction a string", _set("stats.edge_cut_fraction", "3%"),
     "field stats.edge_cut_fraction"),
    ("nested graph name", _set("graph_name", _nested(40)), "nests JSON deeper"),
    ("nested partitioner options", _set("partitioner.options", {"a": _nested(6)}),
     "field partitioner.options"),
    ("meta.json emptied", lambda m: m.clear(), "not a pyg-dist-partition meta.json"),
]


@pytest.mark.parametrize("change, expected", [c[1:] for c in META_CASES],
                         ids=[c[0] for c in META_CASES])
def test_bad_meta_json_is_refused_naming_the_field(dataset, change, expected):
    _edit_meta(dataset, change)
    with pytest.raises(PartitionFormatError) as info:
        PartitionReader(dataset)
    assert expected in str(info.value)
    assert "partition it again" in str(info.value) or "meta.json" in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("[" * 200_000 + "]" * 200_000, "nests JSON deeper"),  # RecursionError in json
    ('{"format": "pyg-dist-partition", "num_nodes": NaN}', "not valid JSON"),
    ('{"format": "pyg-dist-partition", "format": "x"}', "repeats a key"),
    ("\xff\xfe", "not valid JSON"),
], ids=["recursion", "nan", "repeated key", "not utf-8"])
def test_malformed_meta_json_text_is_refused(dataset, text, expected):
    (dataset / "meta.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(PartitionFormatError, match=expected):
        PartitionReader(dataset)


def test_oversized_meta_json_is_refused_before_parsing(dataset, monkeypatch):
    from pyg_dist.partitioning import meta

    monkeypatch.setattr(meta, "MAX_META_BYTES", 1024)
    with pytest.raises(PartitionFormatError, match="more than the 1024"):
        PartitionReader(dataset)


def _negative_first_id(t):
    t["node_ids"][0] = -1  # still sorted


def _id_past_the_end(t):
    t["node_ids"][-1] = 10**6


def _unsorted(t):
    t["node_ids"][[0, 1]] = t["node_ids"][[1, 0]]


def _x_wider(t):
    t["x"] = torch.zeros(t["x"].size(0), 9)


def _extra_tensor(t):
    t["secret"] = torch.zeros(3)


# (id, file, edit of its tensors (checksum updated), text the error must contain)
TENSOR_CASES = [
    ("negative node id", NODES0, _negative_first_id, "node_ids holds ids in [-1,"),
    ("node id past the end", NODES0, _id_past_the_end, "1000000], outside [0,"),
    ("node ids unsorted", NODES0, _unsorted, "sorted"),
    ("x shape other than meta.json", NODES0, _x_wider, "tensor 'x'"),
    ("tensor meta.json does not list", NODES0, _extra_tensor, "does not list"),
    ("indptr decreasing", EDGES0,
     lambda t: t["indptr"].__setitem__(1, t["indptr"][-1] + 1), "indptr"),
    ("source id out of range", EDGES0,
     lambda t: t["indices"].__setitem__(0, 10**9), "indices holds ids"),
    ("negative edge id", EDGES0,
     lambda t: t["edge_ids"].__setitem__(0, -3), "edge_ids holds ids in [-3,"),
    ("edge ids all 0", EDGES0,
     lambda t: t["edge_ids"].zero_(), "edge_ids repeats an id"),
    ("one edge id twice", EDGES0,
     lambda t: t["edge_ids"].__setitem__(1, t["edge_ids"][0]), "edge_ids repeats an id"),
    ("book part id out of range", "book.safetensors",
     lambda t: t["node_part"].__setitem__(0, 7), "part ids must lie in [0, 2)"),
    ("book counts other than meta.json", "book.safetensors",
     lambda t: t["node_part"].__setitem__(slice(None), 0), "meta.json says"),
]


@pytest.mark.parametrize("name, change, expected", [c[1:] for c in TENSOR_CASES],
                         ids=[c[0] for c in TENSOR_CASES])
def test_bad_tensor_file_is_refused_naming_file_and_tensor(dataset, name, change, expected):
    _edit_tensors(dataset, name, change)
    with pytest.raises(PartitionFormatError) as info:
        reader = PartitionReader(dataset)  # header checks
        reader.verify_all()  # the checksums were updated: they pass
        for part in range(2):
            reader.load_part(part)
    assert expected in str(info.value)
    assert name in str(info.value)


def test_node_owned_by_two_parts_is_refused(dataset):
    """Part 1 claims a node the book gives to part 0 (counts unchanged)."""
    book = load_file(str(dataset / "book.safetensors"))["node_part"]
    stolen = int((book == 0).nonzero()[0])

    def steal(t):
        ids = t["node_ids"].clone()
        ids[0] = stolen
        t["node_ids"] = ids.sort().values

    _edit_tensors(dataset, NODES1, steal)
    reader = PartitionReader(dataset)
    reader.load_part(0)
    with pytest.raises(PartitionFormatError, match="exactly one part"):
        reader.load_part(1)


def test_negative_node_id_is_refused_by_the_server_not_wrapped(dataset):
    """Before: node_ids[0] = -1 made the server's lookup table map the last
    global id (the table's row -1) to that row, serving another node's features."""
    _edit_tensors(dataset, NODES0, _negative_first_id)
    with pytest.raises(PartitionFormatError, match=r"node_ids holds ids in \[-1,"):
        PartitionServer(dataset, 0)
    for store in ("memory", "mmap"):
        with pytest.raises(PartitionFormatError):
            PartitionServer(dataset, 0, feature_store=store, graph_store=store,
                            verify=False)


def test_corrupt_safetensors_header_is_refused(dataset):
    path = dataset / NODES0
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    for header in (deep, b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 999999]}}',
                   b'{"x": 1}', b'{"x": {"dtype": "PICKLE", "shape": [], '
                                b'"data_offsets": [0, 0]}}'):
        path.write_bytes(len(header).to_bytes(8, "little") + header + raw[8 + size:])
        _edit_meta(dataset, lambda m: m["files"].update(
            {NODES0: {"sha256": sha256_file(path), "bytes": path.stat().st_size}}))
        with pytest.raises(PartitionFormatError, match=NODES0):
            PartitionReader(dataset)


# Symbolic links ###########################################################


def test_symlinked_file_pointing_outside_is_refused(dataset, tmp_path):
    """Same bytes, checksum matches: only the link check refuses it."""
    outside = tmp_path / "outside.safetensors"
    shutil.copy(dataset / NODES0, outside)
    (dataset / NODES0).unlink()
    (dataset / NODES0).symlink_to(outside)
    with pytest.raises(PartitionFormatError, match="symbolic link"):
        PartitionReader(dataset)


def test_symlinked_part_directory_is_refused(dataset, tmp_path):
    outside = tmp_path / "elsewhere"
    shutil.move(dataset / "part-0", outside)
    (dataset / "part-0").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PartitionFormatError, match="symbolic link"):
        PartitionReader(dataset)


def test_link_swapped_in_after_open_is_refused_at_load(dataset, tmp_path):
    reader = PartitionReader(dataset, verify=False)
    outside = tmp_path / "outside.safetensors"
    shutil.copy(dataset / EDGES0, outside)
    (dataset / EDGES0).unlink()
    (dataset / EDGES0).symlink_to(outside)
    with pytest.raises(PartitionFormatError, match="symbolic link"):
        reader.load_part(0)


def test_symlinked_meta_json_is_refused(dataset, tmp_path):
    outside = tmp_path / "meta.json"
    shutil.copy(dataset / "meta.json", outside)
    (dataset / "meta.json").unlink()
    (dataset / "meta.json").symlink_to(outside)
    with pytest.raises(PartitionFormatError, match="symbolic link"):
        PartitionReader(dataset)


def test_a_fifo_for_meta_json_is_refused_not_waited_on(dataset):
    # Nobody writes into it: opening it for reading the usual way would
    # block until somebody does (a trainer told this directory by a hostile
    # same-host server, connect(colocate=True), would hang).
    (dataset / "meta.json").unlink()
    os.mkfifo(dataset / "meta.json")
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from pyg_dist.partitioning import PartitionReader\n"
         "try:\n    PartitionReader(sys.argv[1])\nexcept Exception as exc:\n"
         "    print(type(exc).__name__, exc)", str(dataset)],
        capture_output=True, text=True, timeout=60)
    assert "PartitionFormatError" in result.stdout and "not a regular file" in result.stdout


def test_the_root_itself_may_be_a_link(dataset, tmp_path):
    link = tmp_path / "link-to-ds"
    link.symlink_to(dataset, target_is_directory=True)
    reader = PartitionReader(link)
    reader.verify_all()
    assert reader.load_part(1).num_nodes == _meta(dataset)["parts"][1]["stats"]["num_nodes"]


# The command line #########################################################


@pytest.mark.parametrize("change, expected", [
    (_set("num_nodes", "600"), "field num_nodes"),
    (_set("books", []), "field books"),
    (_set("graph_name", _nested(500)), "nests JSON deeper"),
], ids=["num_nodes", "empty books", "nested"])
def test_info_on_a_bad_dataset_prints_one_line(dataset, change, expected):
    _edit_meta(dataset, change)
    out = subprocess.run([sys.executable, "-m", "pyg_dist", "info", str(dataset)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyg-dist info: error:"), out.stderr
    assert expected in lines[0]
