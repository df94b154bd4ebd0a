"""Partitioning from files across the ranks of a torchrun job
(``pyg_dist.partitioning.cross_host``): two real ranks on loopback (gloo)
write the dataset one host writes for the same book, byte for byte,
homogeneous and by type, edge attributes included; each rank writes its own
parts."""

from __future__ import annotations

import json
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import load_file
from support.servers import run_process_tree

from pyg_dist.partitioning.file_export import write_data_files, write_hetero_data_files
from pyg_dist.partitioning.out_of_core import partition_files
from pyg_dist.plugins import PARTITIONERS, PluginRegistry

# Each rank reports that it finished, with the meta.json it returned (torchrun
# shows rank 0's output only).
_RANK = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch.distributed as dist
    from pyg_dist.partitioning.cross_host import partition_files_across_ranks
    dist.init_process_group("gloo")
    meta = partition_files_across_ranks(sys.argv[1], 3, sys.argv[2], sys.argv[3],
                                        chunk_edges=777, graph_name="g")
    Path(sys.argv[4], f"rank-{dist.get_rank()}").write_text(json.dumps(meta))
    dist.destroy_process_group()
""")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _split_parquet(directory: Path) -> None:
    """Three parquet files instead of one: each rank reads its own range."""
    path = next(directory.glob("*.parquet"))
    table = pq.read_table(path)
    path.unlink()
    cuts = [0, table.num_rows // 5, table.num_rows // 2, table.num_rows]
    for i in range(3):
        pq.write_table(table.slice(cuts[i], cuts[i + 1] - cuts[i]),
                       directory / f"part-{i:05d}.parquet", row_group_size=400)


def _torchrun(script: Path, *args: str) -> None:
    done = run_process_tree(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--standalone", str(script), *args], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("kind, partitioner", [("homogeneous", "hash"),
                                               ("typed", "random")])
def test_two_ranks_write_the_dataset_one_host_writes(tmp_path, kind, partitioner):
    """``hash`` and ``random`` compute the whole book on every rank: the
    same book, so the same dataset as one host's, byte for byte."""
    source = _source(tmp_path, kind)
    partition_files(source, 3, tmp_path / "one-host", partitioner, graph_name="g",
                    chunk_edges=777)
    reports = _run_two_ranks(tmp_path, source, partitioner)
    metas = [json.loads((reports / f"rank-{r}").read_text()) for r in (0, 1)]
    assert metas[0] == metas[1] == json.loads((tmp_path / "two-ranks" / "meta.json").read_text())
    one, two = _files(tmp_path / "one-host"), _files(tmp_path / "two-ranks")
    assert sorted(one) == sorted(two)
    for name in one:
        assert one[name] == two[name], name
    # Nothing left beside ROOT: no staging directory, no probe file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["files", "one-host", "rank.py",
                                                          "reports", "two-ranks"]


def test_streaming_across_ranks_writes_what_one_host_writes_for_its_book(tmp_path,
                                                                         monkeypatch):
    """``streaming`` assigns across the ranks (its book differs from one
    host's); given that book, one host writes the same books, parts and
    checksums, byte for byte."""
    source = _source(tmp_path, "homogeneous")
    _run_two_ranks(tmp_path, source, "streaming")
    book = load_file(str(tmp_path / "two-ranks" / "book.safetensors"))
    (assignment,) = book.values()
    np.save(tmp_path / "book.npy", assignment)
    (tmp_path / "given_book.py").write_text(_GIVEN_BOOK)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = PluginRegistry([EntryPoint("given", "given_book:GivenBook", PARTITIONERS)])
    partition_files(source, 3, tmp_path / "one-host", "given", graph_name="g",
                    chunk_edges=777, registry=registry, path=str(tmp_path / "book.npy"))
    one, two = _files(tmp_path / "one-host"), _files(tmp_path / "two-ranks")
    assert sorted(one) == sorted(two)
    for name in one:
        if name != "meta.json":
            assert one[name] == two[name], name
    metas = [json.loads(files["meta.json"]) for files in (one, two)]
    assert metas[1].pop("partitioner")["name"] == "streaming"
    metas[0].pop("partitioner")
    assert metas[0] == metas[1]
    # Every part holds a third of the nodes, within the slack (5%) and what
    # the ranks' rounds may overshoot.
    counts = np.bincount(assignment.astype(np.int64), minlength=3)
    assert counts.sum() == 600 and counts.max() <= 1.1 * 600 / 3


_GIVEN_BOOK = """
import numpy as np
class GivenBook:
    def __init__(self, path):
        self.path = path
    def assign_stream(self, stream, num_parts):
        return np.load(self.path)
    def options(self):
        return {}
"""


def _source(tmp_path: Path, kind: str) -> Path:
    from test_out_of_core import _graph
    from test_out_of_core_hetero import _hetero

    if kind == "typed":
        source = write_hetero_data_files(_hetero(), tmp_path / "files")
        _split_parquet(source / "edges" / "author__writes__paper")
    else:
        source = write_data_files(_graph(), tmp_path / "files")
        _split_parquet(source / "edges")
    return source


def _run_two_ranks(tmp_path: Path, source: Path, partitioner: str) -> Path:
    script, reports = tmp_path / "rank.py", tmp_path / "reports"
    script.write_text(_RANK)
    reports.mkdir()
    _torchrun(script, str(source), str(tmp_path / "two-ranks"), partitioner, str(reports))
    return reports


def test_without_a_process_group_it_is_a_typed_error(tmp_path):
    from pyg_dist.errors import InvalidPartitionArgumentError
    from pyg_dist.partitioning.cross_host import partition_files_across_ranks

    with pytest.raises(InvalidPartitionArgumentError, match="torchrun"):
        partition_files_across_ranks(tmp_path, 2, tmp_path / "out")
