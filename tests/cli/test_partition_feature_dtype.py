"""``pyg-dist partition --feature-dtype``: the feature matrices are written
in that precision (and ``info`` shows it); the file path refuses it with one
line and writes nothing."""

from __future__ import annotations

import pytest
import torch

from pyg_dist.cli import main
from pyg_dist.partitioning import PartitionReader


def test_feature_dtype_writes_the_features_in_that_precision(tmp_path, capsys):
    root = tmp_path / "fake2"
    assert main(["partition", "pyg_dist.datasets:fake", str(root), "-n", "2", "-p", "random",
                 "--feature-dtype", "float16", "--no-progress"]) == 0
    reader = PartitionReader(root, verify=True)
    specs = reader.node_feature_specs(None)
    assert specs["x"]["dtype"] == "float16" and specs["y"]["dtype"] == "int64"
    part = reader.load_part(0, mmap=False, topology=False)
    assert part.nodes[None].features["x"].dtype == torch.float16


def test_feature_dtype_with_from_is_one_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "in" / "edges").mkdir(parents=True)
    code = main(["partition", "--from", str(tmp_path / "in"), str(tmp_path / "out"), "-n", "2",
                 "--feature-dtype", "bfloat16", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "--feature-dtype applies to DATASET only" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_other_precisions_are_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["partition", "pyg_dist.datasets:fake", str(tmp_path / "o"), "-n", "2",
              "--feature-dtype", "int8"])
    assert exc.value.code == 2
    assert "invalid choice: 'int8'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
