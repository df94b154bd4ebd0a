"""The heterogeneous IMDB examples, end to end: ``to_hetero(GraphSAGE)`` and an
``HGTConv`` model train unmodified under ``pyg-dist launch`` (2 parts, 2 DDP
ranks) about as well as the one-process reference."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.examples import EXAMPLES, launch_command, printed_value
from support.servers import run_process_tree

from pyg_dist.datasets import imdb
from pyg_dist.partitioning.writer import partition


@pytest.fixture(scope="module")
def imdb_parts(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("imdb") / "parts")
    partition(imdb(), 2, root)
    return root


@pytest.mark.timeout(900)
@pytest.mark.parametrize("model, args", [
    ("sage", ["--epochs", "3"]),
    ("hgt", ["--epochs", "2", "--hidden", "32"]),
])
def test_imdb_trains_under_launch_as_well_as_in_one_process(imdb_parts, model, args):
    args = ["--model", model, "--seed", "0", *args]
    dist = run_process_tree(
        launch_command(imdb_parts, 2, str(EXAMPLES / "train_hetero_imdb_dist.py"), *args),
        timeout=600)
    assert dist.returncode == 0, dist.stdout[-2000:] + dist.stderr[-4000:]
    local = subprocess.run([sys.executable, str(EXAMPLES / "train_hetero_imdb_local.py"), *args],
                           capture_output=True, text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-4000:]
    dist_acc = printed_value("test_acc", dist.stdout)
    local_acc = printed_value("test_acc", local.stdout)
    # A few epochs each, so the bounds are loose; the majority genre is ~38%
    # of the test movies.
    assert dist_acc > 0.45 and local_acc > 0.45, (dist_acc, local_acc)
    assert abs(dist_acc - local_acc) < 0.12, (dist_acc, local_acc)
